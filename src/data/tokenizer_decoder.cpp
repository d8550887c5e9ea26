#include "data/tokenizer_decoder.h"

#include <string_view>

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
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  const int lo = hex_digit(token[4]);
  if (lo < 0) return -1;
  if (token[3] == '+') return lo;
  const int hi = hex_digit(token[3]);
  return hi < 0 ? -1 : hi * 16 + lo;
}

void replace_all(std::string& s, const std::string& pattern, const std::string& content) {
  size_t at = s.find(pattern);
  if (at == std::string::npos) return;
  std::string out;
  size_t done = 0;
  for (; at != std::string::npos; at = s.find(pattern, done)) {
    out.append(s, done, at - done);
    out += content;
    done = at + pattern.size();
  }
  out.append(s, done, std::string::npos);
  s.swap(out);
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

}  // namespace

std::string decode_chain(const std::vector<DecoderStep>& steps, std::vector<std::string>& tokens) {
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::Replace:
        for (std::string& t : tokens) replace_all(t, step.pattern, step.content);
        break;
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
          replace_all(tokens[i], step.replacement, i == 0 && step.drop_first ? "" : " ");
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace sbp::tokenizer_detail
