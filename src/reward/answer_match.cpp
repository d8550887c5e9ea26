#include "reward/answer_match.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace sbp {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Contents of the last \boxed{...} whose braces balance; nullopt if there is none.
std::optional<std::string> last_boxed(std::string_view text) {
  constexpr std::string_view kBoxed = "\\boxed{";
  size_t pos = text.rfind(kBoxed);
  while (pos != std::string_view::npos) {
    const size_t open = pos + kBoxed.size();
    int depth = 1;
    for (size_t i = open; i < text.size(); ++i) {
      if (text[i] == '{') ++depth;
      if (text[i] == '}' && --depth == 0) return std::string(text.substr(open, i - open));
    }
    // Unbalanced (a truncated completion): try the \boxed{ before it.
    if (pos == 0) break;
    pos = text.rfind(kBoxed, pos - 1);
  }
  return std::nullopt;
}

// Position just after the last case-insensitive occurrence of `marker`, or npos.
size_t after_last(std::string_view text, std::string_view marker, bool ignore_case) {
  if (text.size() < marker.size()) return std::string_view::npos;
  for (size_t i = text.size() - marker.size() + 1; i-- > 0;) {
    bool same = true;
    for (size_t k = 0; k < marker.size() && same; ++k) {
      const char a = text[i + k], b = marker[k];
      same = ignore_case ? std::tolower(static_cast<unsigned char>(a)) ==
                               std::tolower(static_cast<unsigned char>(b))
                         : a == b;
    }
    if (same) return i + marker.size();
  }
  return std::string_view::npos;
}

std::optional<std::string> after_marker(std::string_view text) {
  size_t at = after_last(text, "####", false);
  if (at == std::string_view::npos) at = after_last(text, "answer:", true);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at);
  rest = rest.substr(0, rest.find('\n'));
  rest = trim(rest);
  if (rest.empty()) return std::nullopt;
  return std::string(rest);
}

// Length of the number starting at s[i] (sign, digits with thousands commas, decimals,
// optionally "/digits"), or 0 if none starts there.
size_t number_length(std::string_view s, size_t i) {
  size_t j = i;
  if (j < s.size() && (s[j] == '-' || s[j] == '+')) ++j;
  const size_t digits_start = j;
  while (j < s.size() && (is_digit(s[j]) ||
                          (s[j] == ',' && j > digits_start && j + 3 < s.size() && is_digit(s[j + 1]) &&
                           is_digit(s[j + 2]) && is_digit(s[j + 3]))))
    ++j;
  if (j == digits_start) {
    // ".5" is a number too.
    if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
      ++j;
      while (j < s.size() && is_digit(s[j])) ++j;
      return j - i;
    }
    return 0;
  }
  if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
    ++j;
    while (j < s.size() && is_digit(s[j])) ++j;
  } else if (j + 1 < s.size() && s[j] == '/' && is_digit(s[j + 1])) {
    ++j;
    while (j < s.size() && is_digit(s[j])) ++j;
  }
  return j - i;
}

std::optional<std::string> last_number(std::string_view text) {
  std::optional<std::string> found;
  size_t i = 0;
  while (i < text.size()) {
    // A sign belongs to the number only where it cannot be a binary operator ("3-4").
    const bool sign_ok = (text[i] == '-' || text[i] == '+') && (i == 0 || !is_digit(text[i - 1]));
    if (is_digit(text[i]) || sign_ok || text[i] == '.') {
      const size_t n = number_length(text, i);
      if (n > 0) {
        found = std::string(text.substr(i, n));
        i += n;
        continue;
      }
    }
    ++i;
  }
  return found;
}

}  // namespace

std::optional<std::string> extract_final_answer(std::string_view completion) {
  if (auto boxed = last_boxed(completion)) return boxed;
  if (auto marked = after_marker(completion)) return marked;
  return last_number(completion);
}

namespace {

// Removes trailing '.' and whitespace.
std::string_view strip_trailing_period(std::string_view s) {
  while (!s.empty() && (s.back() == '.' || is_space(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string normalize_answer(std::string_view answer) {
  // "\text{Paris}.": the period first, then the \text{} wrapper, then '$' and spaces.
  std::string_view s = strip_trailing_period(trim(answer));
  constexpr std::string_view kText = "\\text{";
  if (s.substr(0, kText.size()) == kText && !s.empty() && s.back() == '}')
    s = trim(s.substr(kText.size(), s.size() - kText.size() - 1));
  std::string out;
  out.reserve(s.size());
  bool pending_space = false;
  for (char c : s) {
    if (c == '$') continue;
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return std::string(strip_trailing_period(out));
}

std::optional<double> parse_answer_number(std::string_view normalized) {
  std::string s;
  for (char c : normalized)
    if (c != ',' && c != ' ') s += c;
  if (!s.empty() && s.back() == '%') s.pop_back();
  if (s.empty() || number_length(s, 0) != s.size()) return std::nullopt;
  const size_t slash = s.find('/');
  if (slash != std::string::npos) {
    const double num = std::strtod(s.substr(0, slash).c_str(), nullptr);
    const double den = std::strtod(s.substr(slash + 1).c_str(), nullptr);
    if (den == 0.0) return std::nullopt;
    return num / den;
  }
  return std::strtod(s.c_str(), nullptr);
}

bool answers_match(std::string_view predicted, std::string_view reference) {
  const std::string a = normalize_answer(predicted), b = normalize_answer(reference);
  const std::optional<double> x = parse_answer_number(a), y = parse_answer_number(b);
  if (x && y) {
    if (!std::isfinite(*x) || !std::isfinite(*y)) return *x == *y;
    return std::fabs(*x - *y) <= std::max(1e-9, 1e-6 * std::max(std::fabs(*x), std::fabs(*y)));
  }
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace sbp
