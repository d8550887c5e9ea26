#include "train/config_key.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace sbp {

[[noreturn]] void bad_value(const std::string& where, const std::string& key,
                            const std::string& want, const YAML::Node& n) {
  std::string got = n.IsScalar()     ? "'" + n.Scalar() + "'"
                    : n.IsSequence() ? "a list"
                    : n.IsMap()      ? "a mapping"
                                     : "nothing";
  throw InputError(where + ": " + key + ": expected " + want + ", got " + got);
}

std::string as_string(const YAML::Node& n, const std::string& key, const std::string& where) {
  if (n.IsNull()) return "";
  if (!n.IsScalar()) bad_value(where, key, "a string", n);
  return n.Scalar();
}

double as_number(const YAML::Node& n, const std::string& key, const std::string& where) {
  if (!n.IsScalar()) bad_value(where, key, "a number", n);
  const std::string& s = n.Scalar();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    bad_value(where, key, "a number", n);
  // The engine computes in fp32: a number past float's range would become inf there.
  if (std::fabs(v) > std::numeric_limits<float>::max())
    bad_value(where, key, "a number within fp32 range (|x| <= 3.4e38)", n);
  return v;
}

int64_t as_integer(const YAML::Node& n, const std::string& key, const std::string& where) {
  if (!n.IsScalar()) bad_value(where, key, "an integer", n);
  const std::string& s = n.Scalar();
  int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec == std::errc() && r.ptr == s.data() + s.size()) return v;
  // 1e3 and 2048.0 are integers too
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || d != std::floor(d) || std::fabs(d) > 9.0e18)
    bad_value(where, key, "an integer", n);
  return static_cast<int64_t>(d);
}

bool as_bool(const YAML::Node& n, const std::string& key, const std::string& where) {
  if (!n.IsScalar()) bad_value(where, key, "true or false", n);
  const std::string& s = n.Scalar();
  if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "False" || s == "no" || s == "off") return false;
  bad_value(where, key, "true or false", n);
}

void require_key(bool ok, const TrainConfig& c, const std::string& key, const std::string& what) {
  if (!ok) throw InputError(c.where(key) + ": " + key + " " + what);
}

void require_range(const TrainConfig& c, const std::string& key, int64_t v, int64_t lo,
                   int64_t hi) {
  if (v < lo || v > hi)
    throw InputError(c.where(key) + ": " + key + " is " + std::to_string(v) + ", outside [" +
                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// `v` is the value as trainer_state.json stores it: `auto` chunks and optionals are strings
// there, within any bound.
void check_key(const ConfigKey& k, const TrainConfig& c) {
  const nlohmann::json v = k.get(c);
  if (k.required)
    require_key(!v.get_ref<const std::string&>().empty(), c, k.name,
                "is required (" + std::string(k.required) + ")");
  if (k.rule) k.rule(c, k);
  if (const auto* b = std::get_if<RealBound>(&k.bound))
    require_key(within(b->interval, v.get<double>()), c, k.name, bound_text(b->interval) + b->note);
  if (const auto* b = std::get_if<IntegerBound>(&k.bound); b && v.is_number()) {
    const int64_t x = v.get<int64_t>();
    if (b->outside) require_key(x >= b->lo && x <= b->hi, c, k.name, b->outside);
    if (b->below) require_key(x >= b->lo, c, k.name, b->below);
    require_range(c, k.name, x, b->lo, b->hi);
  }
}

}  // namespace sbp
