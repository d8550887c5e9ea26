#pragma once
// Range checks for numeric command-line flags, attached with CLI11's ->check(): they run only
// when the flag is given, so a default of 0 can still mean "not set" while an explicit
// `--layers 0` or `--layer-chunk -1` is an error instead of being silently ignored. Their
// messages become "streambp: error: --flag: ..." (one line, exit 1) in main().
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/output_file.h"

namespace sbp::cli {

// An integer in [lo, hi]; the text is parsed here too, so that a number past int64 is named as
// out of range rather than "could not convert".
inline CLI::Validator int_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const auto range = "must be an integer from " + std::to_string(lo) + " to " +
                           std::to_string(hi) + ", got '" + s + "'";
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || end != s.c_str() + s.size()) return range;
        if (errno == ERANGE || v < lo || v > hi) return range;
        return "";
      },
      "INT");
}

// An unsigned 64-bit integer (--seed): CLI11 reads "-1" into a uint64_t as 2^64 - 1, so a
// negative seed silently became another seed. Digits only, at most 2^64 - 1.
inline CLI::Validator uint64_flag() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const auto want = "must be an integer from 0 to 18446744073709551615, got '" + s + "'";
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return want;
        errno = 0;
        std::strtoull(s.c_str(), nullptr, 10);
        return errno == ERANGE ? want : "";
      },
      "UINT");
}

// A string flag whose absence has a default: given, it must say something (`--output ''` used
// to mean standard output, `--stop ''` was ignored).
inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return s.empty() ? "is empty; give a value, or omit the flag for its default" : "";
      },
      "TEXT");
}

// A finite number in (0, hi]: a NaN would pass an ordinary range check (its comparisons are false).
inline CLI::Validator positive_finite(double hi) {
  return CLI::Validator(
      [hi](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || !(v > 0) || v > hi)
          return "must be a finite number above 0 and at most " + CLI::detail::to_string(hi) +
                 ", got '" + s + "'";
        return "";
      },
      "FLOAT");
}

// A finite number in [lo, hi]: NaN and inf (which strtod accepts, and which a plain comparison
// lets through) are named, not turned into a default or carried into the arithmetic.
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || !(v >= lo) ||
            !(v <= hi))
          return "must be a finite number from " + CLI::detail::to_string(lo) + " to " +
                 CLI::detail::to_string(hi) + ", got '" + s + "'";
        return "";
      },
      "FLOAT");
}

// An output file's directory must exist, and the file must be one that output_file's rule writes
// (core/output_file.h: not a directory, a dangling symlink, a socket), before the work starts: a
// bench or gradcheck of minutes used to run to the end and only then fail to write its --json.
inline void check_output_dir(const char* flag, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw InputError(std::string(flag) + " " + path + ": " + parent.string() +
                     " is not a directory");
  try {
    output_target(path);
  } catch (const InputError& e) {
    throw InputError(std::string(flag) + " " + e.what());
  }
}

// --dtype of init and merge: a weights dtype as core/dtype.h spells it (f32, bf16, f16).
inline CLI::IsMember weight_dtype_names() {
  std::vector<std::string> names;
  for (const EnumName<DType>& n : kWeightDTypeNames) names.push_back(n.name);
  return CLI::IsMember(names);
}
inline DType weight_dtype_from_flag(const std::string& s) {
  return parse_enum<DType>(kWeightDTypeNames, s, "--dtype");
}

constexpr int64_t kMaxFlagInt = 2147483647;  // 2^31-1: tokens, chunks, layers, repeats

}  // namespace sbp::cli
