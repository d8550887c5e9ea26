#include "plan/size_arg.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace sbp {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Multiplier of a unit suffix; 0 if unknown.
double unit_scale(const std::string& u) {
  if (u.empty() || u == "b") return 1.0;
  if (u == "kb") return 1e3;
  if (u == "mb") return 1e6;
  if (u == "gb") return 1e9;
  if (u == "tb") return 1e12;
  if (u == "kib") return 1024.0;
  if (u == "mib") return 1024.0 * 1024.0;
  if (u == "gib") return 1024.0 * 1024.0 * 1024.0;
  if (u == "tib") return 1024.0 * 1024.0 * 1024.0 * 1024.0;
  return 0.0;
}

}  // namespace

int64_t parse_size(const std::string& text, const std::string& field) {
  const std::string bad =
      field + ": '" + text + "' is not a size (examples: 80GiB, 2.5GB, 512MiB, 1000000 for bytes)";
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(value)) throw InputError(bad);
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  const double scale = unit_scale(lower(unit));
  if (scale == 0.0) throw InputError(bad);
  if (value < 0.0) throw InputError(field + ": '" + text + "' is negative");
  const double bytes = std::floor(value * scale);
  if (bytes > 4.6e18) throw InputError(field + ": '" + text + "' is too large");
  return static_cast<int64_t>(bytes);
}

std::optional<int64_t> parse_chunk_size(const std::string& text) {
  if (text == "auto") return 0;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  if (used != text.size() || v < 1) return std::nullopt;
  return v;
}

int64_t parse_chunk_flag(const std::string& text, const std::string& flag) {
  const std::optional<int64_t> v = parse_chunk_size(text);
  if (!v) throw InputError(flag + ": '" + text + "' is neither a positive number of rows nor auto");
  return *v;
}

}  // namespace sbp
