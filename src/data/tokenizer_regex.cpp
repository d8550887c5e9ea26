#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer_regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "data/tokenizer_utf8.h"

namespace sbp::tokenizer_detail {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Frees a match block when a search loop ends, by return or by exception.
struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

// Oniguruma (the library's regex engine) takes \s to be Unicode White_Space; PCRE2's \s also
// matches U+180E. Spelling the property out keeps the two engines' splits identical. Oniguruma's
// \uHHHH escape, which PCRE2 lacks, becomes \x{HHHH}.
std::string onig_compatible(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool quoting = false;  // inside \Q...\E everything is literal
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      out += c;
      continue;
    }
    const char next = pattern[++i];
    if (quoting) {
      if (next == 'E') quoting = false;
      out += c;
      out += next;
    } else if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else if (next == 'u' && i + 4 < pattern.size() &&
               pattern.find_first_not_of("0123456789abcdefABCDEF", i + 1) >= i + 5) {
      // Oniguruma's \uHHHH is PCRE2's \x{HHHH}.
      out += "\\x{" + pattern.substr(i + 1, 4) + "}";
      i += 4;
    } else {
      if (next == 'Q') quoting = true;
      out += c;  // any other escape (including an escaped backslash) passes through whole
      out += next;
    }
  }
  return out;
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  bool never_matches = false;  // an empty String pattern splits nothing, as in the library
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& where)
    : compiled_(std::make_unique<Compiled>()), pattern_(pattern) {
  if (literal && pattern.empty()) {
    compiled_->never_matches = true;
    return;
  }
  // UCP makes \s, \d, \w and [[:classes:]] Unicode-aware, as they are in Oniguruma.
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  const std::string source = literal ? pattern : onig_compatible(pattern);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                  options, &err, &err_offset, nullptr);
  if (!compiled_->code) {
    throw InputError(where + ": regex " + pattern + " does not compile (PCRE2, at offset " +
                     std::to_string(err_offset) + " of " + source + "): " + pcre2_message(err));
  }
  // JIT makes pre-tokenization several times faster; without it (an unsupported CPU) the
  // interpreter gives the same matches.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  if (compiled_->never_matches) return;
  MatchData data;
  if (!data.md) throw Error("tokenizer: out of memory for regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_end = std::string_view::npos;
  while (pos <= text.size()) {
    // The text was checked to be valid UTF-8 once; checking it again on every call would make
    // the whole scan quadratic.
    int rc = pcre2_match(compiled_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.md,
                         nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // A very long run (e.g. of spaces) can exhaust the JIT's small stack; the interpreter keeps
      // its backtracking state on the heap.
      rc = pcre2_match(compiled_->code, subject, text.size(), pos,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw InputError("tokenizer: regex /" + pattern_ + "/ failed at byte " + std::to_string(pos) +
                       ": " + pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t begin = ov[0], end = ov[1];
    if (begin == end && end == last_end) {
      if (pos >= text.size()) break;
      pos += utf8_char_len(static_cast<unsigned char>(text[pos]));
      continue;
    }
    out.push_back({begin, end});
    pos = end;
    last_end = end;
  }
}

}  // namespace sbp::tokenizer_detail
