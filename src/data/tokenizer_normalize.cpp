#include "data/tokenizer_normalize.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

namespace {

bool is_ascii(std::string_view s) {
  unsigned char any = 0;
  for (char c : s) any |= static_cast<unsigned char>(c);
  return any < 0x80;
}

utf8proc_option_t options_for(NormalForm form) {
  const int base = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: return static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE);
    case NormalForm::NFD: return static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE);
    case NormalForm::NFKC:
      return static_cast<utf8proc_option_t>(base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::NFKD:
      return static_cast<utf8proc_option_t>(base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return static_cast<utf8proc_option_t>(base);
}

void normalize_runs(std::string_view text, NormalForm form, std::string& out) {
  // Only runs of non-ASCII characters need utf8proc. An ASCII character is a starter that no
  // composition takes as its second part, so a run can only interact with the one ASCII
  // character before it (e + U+0301 -> é): that character is normalized along with the run.
  out.clear();
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      out += text[i++];
      continue;
    }
    size_t begin = i;
    if (begin > 0) {
      --begin;
      out.pop_back();
    }
    while (i < text.size() && static_cast<unsigned char>(text[i]) >= 0x80) ++i;
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + begin),
                     static_cast<utf8proc_ssize_t>(i - begin), &result, options_for(form));
    if (n < 0) {
      throw InputError(std::string("tokenizer: normalization failed: ") + utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
    std::free(result);
  }
}

// Copies `text` to `out` character by character through `map`, which appends the character's
// replacement (nothing, to delete it). Returns whether anything changed.
template <typename Map>
bool map_chars(std::string_view text, std::string& out, Map map) {
  out.clear();
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char32_t cp = utf8_next(text, i);
    map(cp, out);
  }
  return out != text;
}

// The BertNormalizer's CJK ideograph blocks (its is_chinese_char).
bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool bert(const NormalizerStep& step, std::string_view text, std::string& out) {
  std::string current(text), next;
  if (step.clean_text) {
    // NUL, U+FFFD and controls (category C, except \t \n \r) go; whitespace becomes ' '.
    map_chars(current, next, [](char32_t c, std::string& o) {
      const bool tab_or_newline = c == '\t' || c == '\n' || c == '\r';
      if (c == 0 || c == 0xFFFD || (!tab_or_newline && is_other(c))) return;
      utf8_append(o, tab_or_newline || is_white_space(c) ? U' ' : c);
    });
    current.swap(next);
  }
  if (step.chinese_chars) {
    map_chars(current, next, [](char32_t c, std::string& o) {
      if (is_chinese_char(c)) {
        o += ' ';
        utf8_append(o, c);
        o += ' ';
      } else {
        utf8_append(o, c);
      }
    });
    current.swap(next);
  }
  if (step.strip_accents) {
    normalize_runs(current, NormalForm::NFD, next);
    map_chars(next, current, [](char32_t c, std::string& o) {
      if (!is_nonspacing_mark(c)) utf8_append(o, c);
    });
  }
  if (step.lowercase) {
    map_chars(current, next, [](char32_t c, std::string& o) { append_lowercase(o, c); });
    current.swap(next);
  }
  if (current == text) return false;
  out.swap(current);
  return true;
}

bool nmt(std::string_view text, std::string& out) {
  return map_chars(text, out, [](char32_t c, std::string& o) {
    if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
        c == 0x8F || c == 0x9F)
      return;
    const bool to_space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
                          (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 ||
                          c == 0x2581 || c == 0xFEFF || c == 0xFFFD;
    utf8_append(o, to_space ? U' ' : c);
  });
}

bool strip(const NormalizerStep& step, std::string_view text, std::string& out) {
  size_t begin = 0, end = text.size();
  if (step.left) {
    while (begin < end) {
      size_t i = begin;
      if (!is_white_space(utf8_next(text, i))) break;
      begin = i;
    }
  }
  if (step.right) {
    while (end > begin) {
      size_t at = 0;
      if (!is_white_space(utf8_prev(text, end, at))) break;
      end = at;
    }
  }
  if (begin == 0 && end == text.size()) return false;
  out.assign(text.substr(begin, end - begin));
  return true;
}

// The size of `text` with `matches` occurrences of `matched` bytes in all replaced by `content`.
size_t replaced_size(size_t text, size_t matches, size_t matched, size_t content) {
  return text - matched + matches * content;
}

// Refuses a Replace whose result would pass `limit`, before it is built.
void check_replace(const NormalizerStep& step, size_t size, size_t limit, size_t input_bytes) {
  if (size > limit) fail_text_growth(step.where, "normalizer", input_bytes, size);
}

bool replace(const NormalizerStep& step, std::string_view text, std::string& out, size_t limit,
             size_t input_bytes) {
  if (step.regex) {
    // The library replaces every match of the regex, in its iteration order.
    std::vector<Span> matches;
    step.regex->find_all(text, matches);
    if (matches.empty()) return false;
    size_t matched = 0;
    for (const Span& m : matches) matched += m.end - m.begin;
    check_replace(step, replaced_size(text.size(), matches.size(), matched, step.content.size()),
                  limit, input_bytes);
    out.clear();
    size_t done = 0;
    for (const Span& m : matches) {
      out.append(text.substr(done, m.begin - done));
      out += step.content;
      done = m.end;
    }
    out.append(text.substr(done));
    return true;
  }
  // Leftmost non-overlapping occurrences, as the library's String pattern. Both strings are
  // valid UTF-8, so a byte match always starts on a character boundary.
  size_t at = text.find(step.pattern);
  if (at == std::string_view::npos) return false;
  size_t count = 0;
  for (size_t i = at; i != std::string_view::npos; i = text.find(step.pattern, i + step.pattern.size()))
    ++count;
  check_replace(step,
                replaced_size(text.size(), count, count * step.pattern.size(), step.content.size()),
                limit, input_bytes);
  out.clear();
  out.reserve(text.size() + text.size() / 2);
  size_t done = 0;
  for (; at != std::string_view::npos; at = text.find(step.pattern, done)) {
    out.append(text.substr(done, at - done));
    out += step.content;
    done = at + step.pattern.size();
  }
  out.append(text.substr(done));
  return true;
}

}  // namespace

void fail_text_growth(const std::string& where, const char* chain, size_t input_bytes,
                      size_t output_bytes) {
  throw InputError((where.empty() ? std::string("tokenizer: a ") + chain + " step" : where) +
                   ": grows a text of " + std::to_string(input_bytes) +
                   (input_bytes == 1 ? " byte" : " bytes") + " to " +
                   std::to_string(output_bytes) + " bytes, past the " + chain + "'s limit of " +
                   std::to_string(text_growth_limit(input_bytes)) + " (" +
                   std::to_string(kMaxTextGrowth) + " times its input plus " +
                   std::to_string(kTextGrowthSlack) + " bytes)");
}

bool NormalizerStep::can_delete() const {
  switch (kind) {
    case Kind::Replace: return content.empty();
    case Kind::Strip: return left;
    case Kind::StripAccents:
    case Kind::Nmt: return true;
    case Kind::Bert: return clean_text || strip_accents;
    case Kind::Form:
    case Kind::Prepend:
    case Kind::Lowercase:
    case Kind::ByteLevel: return false;
  }
  return false;
}

std::string_view Normalizer::apply(std::string_view text, std::string& buffer) const {
  std::string_view current = text;
  std::string next;
  // One bound for the whole chain, relative to what it was given: each step alone is bounded,
  // a chain multiplies them. Replace is checked before it builds its result; the other steps
  // grow text by at most a small factor and are checked after.
  const size_t limit = text_growth_limit(text.size());
  for (const NormalizerStep& step : steps) {
    // `current` may point into `buffer`, so the step writes elsewhere and the two swap.
    if (!apply_step(step, current, next, limit, text.size())) continue;
    if (next.size() > limit) fail_text_growth(step.where, "normalizer", text.size(), next.size());
    buffer.swap(next);
    current = buffer;
  }
  return current;
}

bool Normalizer::apply_step(const NormalizerStep& step, std::string_view text, std::string& out,
                            size_t limit, size_t input_bytes) {
  using Kind = NormalizerStep::Kind;
  switch (step.kind) {
    case Kind::Form:
      // Every normal form leaves ASCII unchanged; most training text is mostly ASCII.
      if (is_ascii(text)) return false;
      normalize_runs(text, step.form, out);
      return true;
    case Kind::Replace: return replace(step, text, out, limit, input_bytes);
    case Kind::Prepend:
      if (text.empty()) return false;  // the library leaves an empty piece empty
      out.clear();
      out += step.content;
      out += text;
      return true;
    case Kind::Lowercase:
      return map_chars(text, out, [](char32_t c, std::string& o) { append_lowercase(o, c); });
    case Kind::Strip: return strip(step, text, out);
    case Kind::StripAccents:
      return map_chars(text, out, [](char32_t c, std::string& o) {
        if (!is_mark(c)) utf8_append(o, c);
      });
    case Kind::Bert: return bert(step, text, out);
    case Kind::Nmt: return nmt(text, out);
    case Kind::ByteLevel: {
      if (text.empty()) return false;
      const ByteLevelAlphabet& alphabet = byte_level_alphabet();
      out.clear();
      for (char c : text) out += alphabet.byte_to_utf8[static_cast<unsigned char>(c)];
      return true;
    }
  }
  return false;
}

}  // namespace sbp::tokenizer_detail
