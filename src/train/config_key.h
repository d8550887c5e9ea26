#pragma once
// A configuration key of the trainer as one row: how it is set from YAML, how it reads back (as
// trainer_state.json stores it), and everything it must satisfy alone, declared once in the row
// and checked for every row by check_key. The objectives' setting rows
// (objective/objective_settings.h) become rows of this kind, their bounds with them; the
// trainer's own rows are train/config_keys.cpp's.
//
//   field_key<int64_t>("grad_accum", [](TrainConfig& c) -> int64_t& { return c.grad_accum; })
//       .in(IntegerBound{.lo = 1, .hi = 1 << 20, .below = "must be at least 1"})
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <variant>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "core/error.h"
#include "objective/objective_settings.h"
#include "train/train_config.h"

namespace sbp {

// A YAML value as a key's type; anything else is an InputError naming `where` and `key`
// ("cfg.yaml:4: max_tokens: expected an integer, got 'lots'").
[[noreturn]] void bad_value(const std::string& where, const std::string& key,
                            const std::string& want, const YAML::Node& n);
std::string as_string(const YAML::Node& n, const std::string& key, const std::string& where);
double as_number(const YAML::Node& n, const std::string& key, const std::string& where);
int64_t as_integer(const YAML::Node& n, const std::string& key, const std::string& where);
bool as_bool(const YAML::Node& n, const std::string& key, const std::string& where);

// "<where key was set>: <key> <what>" unless ok.
void require_key(bool ok, const TrainConfig& c, const std::string& key, const std::string& what);
// Integer settings are bounded above as well as below: a count nobody means (2^62 epochs, a
// micro-batch of 2^40 tokens) must fail here, in one line naming the key, not overflow an int64
// product or size an allocation later. "<where>: <key> is <v>, outside [<lo>, <hi>]".
void require_range(const TrainConfig& c, const std::string& key, int64_t v, int64_t lo, int64_t hi);

// A real-number key's interval, said the way the objectives' rows say theirs ("must be
// positive", "must be in [0, 1)"), then what its edge value means (" (0: no clipping)").
struct RealBound {
  SettingBound interval;
  const char* note = "";
};

// An integer key's range, said "is 9999999999, outside [1, 1048576]"; a value under `lo` is told
// `below` instead where the key has always said it so ("must be at least 1"), and any value
// outside is told `outside` where the numbers need their meaning (dist.zero).
struct IntegerBound {
  int64_t lo = 0, hi = 0;
  const char* below = nullptr;
  const char* outside = nullptr;
};

using KeyBound = std::variant<std::monostate, RealBound, IntegerBound>;

// One configuration key, a row of config_keys(): how to set it from YAML, how to read it back,
// and everything it must satisfy alone, which check_key() checks for every row. The rules about
// several keys are named checks (train/train_config.cpp).
struct ConfigKey {
  std::string name;
  std::function<void(TrainConfig&, const YAML::Node&, const std::string&)> set;
  std::function<nlohmann::json(const TrainConfig&)> get;
  KeyBound bound;                  // a number's range (none for the other keys)
  const char* required = nullptr;  // must be given, and what it is ("a JSONL file")
  // What is written must not be empty: the key's absence has a default (or means "none") and an
  // empty value has no meaning of its own (`output_dir: ''` used to fall back to out/<config
  // name> without a word). Only what the user writes is checked (a YAML file, an override,
  // Python's keywords): a stored config lists every key, the unset ones as "". The objectives'
  // model directories may be empty: their "" is documented (the starting model).
  bool non_empty = false;
  // Its default where it follows another key (metrics: <output_dir>/metrics.jsonl), filled when
  // it was not given before anything is checked.
  std::function<void(TrainConfig&)> derive;
  // A rule about this key alone that a bound does not say (offload's items, a budget's size),
  // checked before the bound.
  std::function<void(const TrainConfig&, const ConfigKey&)> rule;

  ConfigKey in(KeyBound b) && {
    bound = b;
    return std::move(*this);
  }
  ConfigKey must_give(const char* what) && {
    required = what;
    return std::move(*this);
  }
  ConfigKey given_non_empty() && {
    non_empty = true;
    return std::move(*this);
  }
  ConfigKey derived(std::function<void(TrainConfig&)> fill) && {
    derive = std::move(fill);
    return std::move(*this);
  }
  ConfigKey with_rule(std::function<void(const TrainConfig&, const ConfigKey&)> r) && {
    rule = std::move(r);
    return std::move(*this);
  }
};

// Every rule of the row, in the order the keys have always said them: required, the row's own
// rule, its bound.
void check_key(const ConfigKey& k, const TrainConfig& c);

// A row bound to a field of the config: a string, bool, double or integer of any width (an
// integer that does not fit is "expected a smaller integer").
template <class T, class Ref>
ConfigKey field_key(const std::string& name, Ref ref) {
  ConfigKey k;
  k.name = name;
  k.set = [name, ref](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    T& v = ref(c);
    if constexpr (std::is_same_v<T, std::string>) {
      v = as_string(n, name, where);
    } else if constexpr (std::is_same_v<T, bool>) {
      v = as_bool(n, name, where);
    } else if constexpr (std::is_same_v<T, double>) {
      v = as_number(n, name, where);
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      const int64_t x = as_integer(n, name, where);
      if (x < 0) bad_value(where, name, "a non-negative integer", n);
      v = static_cast<uint64_t>(x);
    } else {
      const int64_t x = as_integer(n, name, where);
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
        bad_value(where, name, "a smaller integer", n);
      v = static_cast<T>(x);
    }
  };
  k.get = [ref](const TrainConfig& c) { return nlohmann::json(ref(const_cast<TrainConfig&>(c))); };
  return k;
}

// A closed set: one of the table's spellings.
template <class E, class Ref>
ConfigKey enum_key(const std::string& name, Ref ref, std::span<const EnumName<E>> table) {
  ConfigKey k;
  k.name = name;
  k.set = [name, ref, table](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (!n.IsScalar() || !try_parse_enum(table, n.Scalar(), &ref(c)))
      throw InputError(where + ": " + name + " must be " + enum_choices(table));
  };
  k.get = [ref, table](const TrainConfig& c) {
    return nlohmann::json(enum_name(table, ref(const_cast<TrainConfig&>(c))));
  };
  return k;
}

// `auto` (an empty optional) or one of the table's spellings.
template <class E, class Ref>
ConfigKey auto_enum_key(const std::string& name, Ref ref, std::span<const EnumName<E>> table) {
  ConfigKey k;
  k.name = name;
  k.set = [name, ref, table](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    std::optional<E>& v = ref(c);
    E e{};
    if (n.IsScalar() && n.Scalar() == "auto") {
      v.reset();
    } else if (n.IsScalar() && try_parse_enum(table, n.Scalar(), &e)) {
      v = e;
    } else {
      throw InputError(where + ": " + name + " must be auto, " + enum_choices(table));
    }
  };
  k.get = [ref, table](const TrainConfig& c) {
    const std::optional<E>& v = ref(const_cast<TrainConfig&>(c));
    return nlohmann::json(v ? enum_name(table, *v) : "auto");
  };
  return k;
}

}  // namespace sbp
