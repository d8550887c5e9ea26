#pragma once
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) that lists all
// non-overlapping matches in a text, the way the `tokenizers` library iterates Oniguruma matches.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sbp::tokenizer_detail {

struct Span {
  size_t begin = 0, end = 0;
};

class Regex {
 public:
  // `literal`: the pattern is a plain string (a Split {"String": ...} pattern).
  // Throws InputError naming `where` if the pattern does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the matches in `text` (valid UTF-8) to `out`, left to right. An empty match right
  // where the previous match ended is skipped, so the search always moves forward.
  void find_all(std::string_view text, std::vector<Span>& out) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string pattern_;
};

}  // namespace sbp::tokenizer_detail
