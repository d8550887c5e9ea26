#include "data/tokenizer_decoder.h"

#include <string_view>
#include <utility>

#include "data/tokenizer_normalize.h"
#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The byte a "<0xNN>" token stands for, or -1. The library parses the two characters with
// u8::from_str_radix(.., 16), which takes either case and also a leading '+' ("<0x+A>" is 10).
int fallback_byte(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  const int lo = hex_digit(token[4]);
  if (lo < 0) return -1;
  if (token[3] == '+') return lo;
  const int hi = hex_digit(token[3]);
  return hi < 0 ? -1 : hi * 16 + lo;
}

// A {"Regex": ...} Replace: every match in `matches` (as the library iterates them) becomes
// `content`.
void replace_regex(std::string& s, const std::vector<Span>& matches, const std::string& content) {
  if (matches.empty()) return;
  std::string out;
  size_t done = 0;
  for (const Span& m : matches) {
    out.append(s, done, m.begin - done);
    out += content;
    done = m.end;
  }
  out.append(s, done, std::string::npos);
  s.swap(out);
}

// The library's ByteLevel decoder: each token made only of byte-level characters becomes the
// bytes they stand for, any other token its own UTF-8; all of it is joined into one token and
// repaired as Rust's from_utf8_lossy does.
void byte_level(std::vector<std::string>& tokens) {
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  std::string bytes;
  std::string token_bytes;
  for (const std::string& token : tokens) {
    token_bytes.clear();
    bool all_mapped = true;
    for (size_t i = 0; i < token.size() && all_mapped;) {
      const char32_t cp = utf8_next(token, i);
      const int b = cp < ByteLevelAlphabet::kMaxCodePoint ? alphabet.cp_to_byte[cp] : -1;
      if (b < 0) all_mapped = false;
      token_bytes += static_cast<char>(b);
    }
    bytes += all_mapped ? token_bytes : token;
  }
  tokens.assign(1, utf8_repair(bytes));
}

// WordPiece's clean-up of English spacing (also used by CTC), in the library's order.
void cleanup(std::string& s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) rust_replace(s, from, to);
}

void word_piece(std::vector<std::string>& tokens, const DecoderStep& step) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& t = tokens[i];
    if (i != 0) {
      if (t.starts_with(step.prefix)) {
        t.erase(0, step.prefix.size());
      } else {
        t.insert(t.begin(), ' ');  // a char: GCC 12 misreads insert(0, " ") here (-Wrestrict)
      }
    }
    if (step.cleanup) cleanup(t);
  }
}

void ctc(std::vector<std::string>& tokens, const DecoderStep& step) {
  std::vector<std::string> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && tokens[i] == tokens[i - 1]) continue;  // repeats collapse (before the pad goes)
    std::string t = tokens[i];
    rust_replace(t, step.pad_token, "");
    if (step.cleanup) {
      cleanup(t);
      rust_replace(t, step.word_delimiter, " ");
    }
    if (!t.empty()) out.push_back(std::move(t));
  }
  tokens.swap(out);
}

// Runs of byte tokens become the text they spell; a run that is not valid UTF-8 becomes one
// U+FFFD per byte (the library's whole-run check, not a per-sequence repair).
void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  size_t run = 0;
  auto flush = [&] {
    if (run == 0) return;
    if (utf8_find_invalid(bytes) == std::string::npos) {
      out.push_back(bytes);
    } else {
      for (size_t i = 0; i < run; ++i) out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
    run = 0;
  };
  for (std::string& token : tokens) {
    const int b = fallback_byte(token);
    if (b >= 0) {
      bytes += static_cast<char>(b);
      ++run;
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  tokens.swap(out);
}

// Cuts up to `start` leading and `stop` trailing copies of the character `ch` from `token`.
// (The library panics when both ends would overlap; here the token just becomes empty.)
void strip(std::string& token, const std::string& ch, size_t start, size_t stop) {
  size_t begin = 0, end = token.size();
  for (size_t i = 0; i < start && token.compare(begin, ch.size(), ch) == 0 && begin < end; ++i)
    begin += ch.size();
  for (size_t i = 0;
       i < stop && end - begin >= ch.size() && token.compare(end - ch.size(), ch.size(), ch) == 0;
       ++i)
    end -= ch.size();
  token = token.substr(begin, end - begin);
}

// The size `s` has after rust_replace(s, pattern, content), without building it.
size_t rust_replaced_size(const std::string& s, const std::string& pattern,
                          const std::string& content) {
  size_t count = 0;
  if (pattern.empty()) {
    count = 1;  // both ends and every character boundary between
    for (size_t i = 0; i < s.size(); i += utf8_char_len(static_cast<unsigned char>(s[i]))) ++count;
  } else {
    for (size_t at = s.find(pattern); at != std::string::npos;
         at = s.find(pattern, at + pattern.size()))
      ++count;
  }
  return s.size() - count * pattern.size() + count * content.size();
}

size_t total_bytes(const std::vector<std::string>& tokens) {
  size_t n = 0;
  for (const std::string& t : tokens) n += t.size();
  return n;
}

// A Replace over every token. The tokens' total is checked against `limit` before each token's
// result is built, so a chain of them never holds more than the limit.
void replace_step(const DecoderStep& step, std::vector<std::string>& tokens, size_t limit,
                  size_t input_bytes) {
  size_t total = total_bytes(tokens);
  std::vector<Span> matches;
  for (std::string& t : tokens) {
    size_t after = 0;
    if (step.regex) {
      matches.clear();
      step.regex->find_all(t, matches);
      size_t matched = 0;
      for (const Span& m : matches) matched += m.end - m.begin;
      after = t.size() - matched + matches.size() * step.content.size();
    } else {
      after = rust_replaced_size(t, step.pattern, step.content);
    }
    total = total - t.size() + after;
    if (total > limit) fail_text_growth(step.where, "decoder", input_bytes, total);
    if (step.regex) {
      replace_regex(t, matches, step.content);
    } else {
      rust_replace(t, step.pattern, step.content);
    }
  }
}

}  // namespace

void rust_replace(std::string& s, const std::string& pattern, const std::string& content) {
  std::string out;
  if (pattern.empty()) {
    out.reserve(s.size() + (s.size() + 1) * content.size());
    out += content;
    for (size_t i = 0; i < s.size();) {
      const size_t n = utf8_char_len(static_cast<unsigned char>(s[i]));
      out.append(s, i, n);
      out += content;
      i += n;
    }
    s.swap(out);
    return;
  }
  size_t at = s.find(pattern);
  if (at == std::string::npos) return;
  size_t done = 0;
  for (; at != std::string::npos; at = s.find(pattern, done)) {
    out.append(s, done, at - done);
    out += content;
    done = at + pattern.size();
  }
  out.append(s, done, std::string::npos);
  s.swap(out);
}

std::string decode_chain(const std::vector<DecoderStep>& steps, std::vector<std::string>& tokens) {
  // One bound for the whole chain, relative to the tokens it was given (see kMaxTextGrowth).
  // The steps other than Replace grow text by at most twice (an empty suffix or delimiter
  // becomes ' ' between characters), so checking after them keeps within twice the limit.
  const size_t input_bytes = total_bytes(tokens);
  const size_t limit = text_growth_limit(input_bytes);
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::Replace: replace_step(step, tokens, limit, input_bytes); break;
      case DecoderStep::Kind::ByteFallback: byte_fallback(tokens); break;
      case DecoderStep::Kind::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::Strip:
        for (std::string& t : tokens) strip(t, step.content, step.start, step.stop);
        break;
      case DecoderStep::Kind::Metaspace:
        // Every replacement becomes ' ', except in the first token, where (unless the scheme
        // is "never") every one is dropped: the library's rule, not just the leading one.
        for (size_t i = 0; i < tokens.size(); ++i)
          rust_replace(tokens[i], step.replacement, i == 0 && step.drop_first ? "" : " ");
        break;
      case DecoderStep::Kind::ByteLevel: byte_level(tokens); break;
      case DecoderStep::Kind::WordPiece: word_piece(tokens, step); break;
      case DecoderStep::Kind::BpeSuffix:
        // The last token's suffix goes, every other one becomes a space.
        for (size_t i = 0; i < tokens.size(); ++i)
          rust_replace(tokens[i], step.prefix, i + 1 == tokens.size() ? "" : " ");
        break;
      case DecoderStep::Kind::Ctc: ctc(tokens, step); break;
    }
    const size_t now = total_bytes(tokens);
    if (now > limit) fail_text_growth(step.where, "decoder", input_bytes, now);
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace sbp::tokenizer_detail
