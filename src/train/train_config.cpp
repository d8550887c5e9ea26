#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <variant>

#include "core/error.h"
#include "core/input_file.h"
#include "engine/exec_config.h"
#include "engine/sampling.h"
#include "model/lora_io.h"
#include "plan/size_arg.h"

namespace sbp {

namespace {

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

void require(bool ok, const TrainConfig& c, const std::string& key, const std::string& what) {
  if (!ok) throw InputError(c.where(key) + ": " + key + " " + what);
}

// Integer settings are bounded above as well as below: a count nobody means (2^62 epochs, a
// micro-batch of 2^40 tokens) must fail here, in one line naming the key, not overflow an int64
// product or size an allocation later.
void require_range(const TrainConfig& c, const std::string& key, int64_t v, int64_t lo,
                   int64_t hi) {
  if (v < lo || v > hi)
    throw InputError(c.where(key) + ": " + key + " is " + std::to_string(v) +
                     ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// Step counts share the trainer state's bound (what a JSON number holds exactly); tokens per
// micro-batch are bounded by the attention kernels' int32 positions.
constexpr int64_t kMaxStepCount = int64_t{1} << 53;
constexpr int64_t kMaxTokensPerBatch = int64_t{1} << 31;

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

// One configuration key, a row of keys() below: how to set it from YAML, how to read it back,
// and everything it must satisfy alone, which check_key() checks for every row. Rules about
// several keys are the named checks of kCrossChecks.
struct Key {
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
  std::function<void(const TrainConfig&, const Key&)> rule;

  Key in(KeyBound b) && {
    bound = b;
    return std::move(*this);
  }
  Key must_give(const char* what) && {
    required = what;
    return std::move(*this);
  }
  Key given_non_empty() && {
    non_empty = true;
    return std::move(*this);
  }
  Key derived(std::function<void(TrainConfig&)> fill) && {
    derive = std::move(fill);
    return std::move(*this);
  }
  Key with_rule(std::function<void(const TrainConfig&, const Key&)> r) && {
    rule = std::move(r);
    return std::move(*this);
  }
};

// Every row's own checks; `v` is the value as trainer_state.json stores it (`auto` chunks and
// optionals are strings there, within any bound).
void check_key(const Key& k, const TrainConfig& c) {
  const nlohmann::json v = k.get(c);
  if (k.required) require(!v.get_ref<const std::string&>().empty(), c, k.name,
                          "is required (" + std::string(k.required) + ")");
  if (k.rule) k.rule(c, k);
  if (const auto* b = std::get_if<RealBound>(&k.bound))
    require(within(b->interval, v.get<double>()), c, k.name,
            bound_text(b->interval) + b->note);
  if (const auto* b = std::get_if<IntegerBound>(&k.bound); b && v.is_number()) {
    const int64_t x = v.get<int64_t>();
    if (b->outside) require(x >= b->lo && x <= b->hi, c, k.name, b->outside);
    if (b->below) require(x >= b->lo, c, k.name, b->below);
    require_range(c, k.name, x, b->lo, b->hi);
  }
}

template <class T, class Ref>
Key bind(const std::string& name, Ref ref) {
  Key k;
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

// layer_chunk / head_chunk: a number of tokens, or `auto` (stored as 0): the largest size whose
// step fits memory_budget (train/auto_chunks.h).
Key chunk_key(const std::string& name, int64_t TrainConfig::*member) {
  Key k;
  k.name = name;
  k.set = [name, member](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (n.IsScalar() && parse_chunk_size(n.Scalar()) == 0) {  // auto
      c.*member = 0;
      return;
    }
    const int64_t v = as_integer(n, name, where);
    if (v < 1) bad_value(where, name, "a positive integer or auto", n);
    c.*member = v;
  };
  k.get = [member](const TrainConfig& c) {
    return c.*member == 0 ? nlohmann::json("auto") : nlohmann::json(c.*member);
  };
  return k;
}

// A closed set: one of the table's spellings.
template <class E, class Ref>
Key enum_key(const std::string& name, Ref ref, std::span<const EnumName<E>> table) {
  Key k;
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
Key auto_enum_key(const std::string& name, Ref ref, std::span<const EnumName<E>> table) {
  Key k;
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

constexpr EnumName<bool> kBoolNames[] = {{true, "true"}, {false, "false"}};

// mode: a preset or layers+head (engine/exec_config.h); the chunk sizes are separate keys.
Key mode_key() {
  Key k;
  k.name = "mode";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    try {
      c.mode = parse_mode(as_string(n, "mode", where));
    } catch (const InputError& e) {
      throw InputError(where + ": mode: " + e.what());
    }
  };
  k.get = [](const TrainConfig& c) { return nlohmann::json(mode_name(c.mode)); };
  return k;
}

Key backend_key() {
  Key k;
  k.name = "backend";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    try {
      c.backend = parse_backend(as_string(n, "backend", where));
    } catch (const InputError& e) {
      throw InputError(where + ": backend: " + e.what());
    }
  };
  k.get = [](const TrainConfig& c) { return nlohmann::json(backend_name(c.backend.kind)); };
  return k;
}

// rewards: a list of reward functions, each a mapping (docs/REWARDS.md):
//   - {type: accuracy, weight: 1.0, answer_field: answer, name: acc}
//   - {type: format, pattern: "^<think>.*</think>", weight: 0.5}
//   - {type: length, max_length: 256, cache_length: 64}
//   - {type: command, command: [python3, reward.py], timeout: 30}   (or a string, split on spaces)
Key rewards_key() {
  Key k;
  k.name = "rewards";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (!n.IsSequence()) bad_value(where, "rewards", "a list of reward functions", n);
    c.rewards.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string at = "rewards[" + std::to_string(i) + "]";
      const YAML::Node r = n[i];
      if (!r.IsMap()) bad_value(where, at, "a mapping (type, weight, ...)", r);
      RewardSpec spec;
      spec.timeout_s = 0.0;  // reward_timeout unless given
      for (auto it = r.begin(); it != r.end(); ++it) {
        const std::string key = it->first.Scalar(), name = at + "." + key;
        const YAML::Node v = it->second;  // a handle: it->second is a temporary
        if (key == "type") spec.type = as_string(v, name, where);
        else if (key == "name") spec.name = as_string(v, name, where);
        else if (key == "weight") spec.weight = as_number(v, name, where);
        else if (key == "answer_field") spec.answer_field = as_string(v, name, where);
        else if (key == "pattern") spec.pattern = as_string(v, name, where);
        else if (key == "max_length") spec.max_length = as_integer(v, name, where);
        else if (key == "cache_length") spec.cache_length = as_integer(v, name, where);
        else if (key == "timeout") spec.timeout_s = as_number(v, name, where);
        else if (key == "command") {
          spec.command.clear();
          if (v.IsSequence()) {
            for (auto word = v.begin(); word != v.end(); ++word)
              spec.command.push_back(as_string(*word, name + "[" +
                                                   std::to_string(spec.command.size()) + "]",
                                               where));
          } else {
            std::istringstream words(as_string(v, name, where));
            for (std::string w; words >> w;) spec.command.push_back(w);
          }
        } else {
          throw InputError(where + ": " + at + ": unknown key '" + key +
                           "' (known: type, name, weight, answer_field, pattern, max_length, "
                           "cache_length, command, timeout)");
        }
      }
      if (spec.type.empty())
        throw InputError(where + ": " + at + ": type is required (" + reward_type_list() + ")");
      if (spec.name.empty()) spec.name = spec.type;
      c.rewards.push_back(std::move(spec));
    }
  };
  k.get = [](const TrainConfig& c) {
    nlohmann::json a = nlohmann::json::array();
    for (const RewardSpec& s : c.rewards) a.push_back(reward_spec_json(s));
    return a;
  };
  return k;
}

// grpo.stop / ppo.stop: a list of stop strings, or one string.
template <class Of>
Key rollout_stop_key(const std::string& section, Of of) {
  Key k;
  k.name = section + ".stop";
  k.set = [of, name = k.name](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    std::vector<std::string> v;
    if (n.IsScalar()) {
      v.push_back(n.Scalar());
    } else if (n.IsSequence()) {
      for (const YAML::Node& e : n) {
        if (!e.IsScalar()) throw InputError(where + ": " + name + " must list strings");
        v.push_back(e.Scalar());
      }
    } else {
      throw InputError(where + ": " + name + " must be a string or a list of strings");
    }
    for (const std::string& s : v)
      if (s.empty()) throw InputError(where + ": " + name + ": an empty stop string");
    of(c).stop = std::move(v);
  };
  k.get = [of](const TrainConfig& c) {
    return nlohmann::json(of(const_cast<TrainConfig&>(c)).stop);
  };
  return k;
}

// An online objective's rollout settings (RolloutSettings) as keys of its section. How sampling's
// numbers go together (temperature, top_p, top_k, min_p) is a check of several keys
// (check_sampling).
std::vector<Key> rollout_keys(const ObjectiveTraits& t) {
  const std::string obj = t.name;
  const auto of = [kind = t.kind](TrainConfig& c) -> RolloutSettings& {
    return c.rollouts.at(kind);
  };
  // An objective whose advantage compares a completion with the others of its prompt's group
  // (GRPO) has no advantage for a group of one: the group's std is undefined (0/0 with the
  // unbiased std TRL uses, so every advantage and then the loss is NaN). TRL refuses
  // num_generations < 2 for GRPO in its config too. PPO's advantages are per token (GAE), so
  // one completion per prompt is its default.
  const bool compares_in_group = t.group == SequenceGroup::configured;
  const auto group_of_one = [obj, of](const TrainConfig& c, const Key& k) {
    require(of(const_cast<TrainConfig&>(c)).num_generations != 1, c, k.name,
            "is 1: " + obj +
                " compares each completion with the others of its prompt's group, and a group "
                "of one has no advantage (its std is undefined); use at least 2");
  };
#define ROLLOUT_KEY(T, field) \
  sbp::bind<T>(obj + "." #field, [of](TrainConfig& c) -> T& { return of(c).field; })
  Key num_generations = ROLLOUT_KEY(int64_t, num_generations)
                            .in(IntegerBound{.lo = compares_in_group ? 2 : 1, .hi = 4096});
  if (compares_in_group) num_generations.rule = group_of_one;
  return {std::move(num_generations),
          ROLLOUT_KEY(int64_t, prompts_per_step).in(IntegerBound{.lo = 1, .hi = int64_t{1} << 20}),
          ROLLOUT_KEY(int64_t, max_completion_length)
              .in(IntegerBound{.lo = 1, .hi = kMaxTokensPerBatch}),
          ROLLOUT_KEY(int64_t, num_iterations).in(IntegerBound{.lo = 1, .hi = 1024}),
          ROLLOUT_KEY(double, temperature),
          ROLLOUT_KEY(double, top_p),
          ROLLOUT_KEY(int64_t, top_k).in(IntegerBound{.lo = 0, .hi = kMaxTokensPerBatch}),
          ROLLOUT_KEY(double, min_p),
          ROLLOUT_KEY(bool, mask_truncated_completions),
          rollout_stop_key(obj, of)};
#undef ROLLOUT_KEY
}

// One of an objective's setting rows (objective/objective_settings.h) as a config key: a number
// or a closed set of its ObjectiveSetup, or a model directory.
Key setting_key(const ObjectiveSetting& row) {
  const std::string name = row.key;
  switch (row.type) {
    case SettingType::number:
      return bind<double>(name, [number = row.number](TrainConfig& c) -> double& {
               return number(c.objective_settings);
             }).in(RealBound{row.bound});
    case SettingType::choice: {
      Key k;
      k.name = name;
      k.set = [name, row](TrainConfig& c, const YAML::Node& n, const std::string& where) {
        if (!n.IsScalar() || !row.choose(c.objective_settings, n.Scalar()))
          throw InputError(where + ": " + name + " must be " + row.choices());
      };
      k.get = [row](const TrainConfig& c) {
        return nlohmann::json(row.chosen(c.objective_settings));
      };
      return k;
    }
    case SettingType::reference_dir:
    case SettingType::value_model_dir: break;
  }
  return bind<std::string>(
      name, [name](TrainConfig& c) -> std::string& { return c.model_dirs.at(name); });
}

// The objectives in the order their sections have in the key table, and so in every list of
// keys an error prints: the offline ones, then the online ones, each in registry order.
std::vector<const ObjectiveTraits*> objectives_in_key_order() {
  std::vector<const ObjectiveTraits*> v;
  for (const bool online : {false, true})
    for (const ObjectiveTraits* t : all_objectives())
      if (t->rollouts == online) v.push_back(t);
  return v;
}

// An objective's keys: its setting rows, and an online objective's rollout keys after its
// reference key (where the key lists have always had them), or after its rows.
std::vector<Key> objective_keys(const ObjectiveTraits& t) {
  std::vector<Key> k;
  bool rollouts_to_add = t.rollouts;
  for (const ObjectiveSetting& row : t.settings) {
    k.push_back(setting_key(row));
    if (rollouts_to_add && row.type == SettingType::reference_dir) {
      const std::vector<Key> r = rollout_keys(t);
      k.insert(k.end(), r.begin(), r.end());
      rollouts_to_add = false;
    }
  }
  if (rollouts_to_add) {
    const std::vector<Key> r = rollout_keys(t);
    k.insert(k.end(), r.begin(), r.end());
  }
  return k;
}

// lora.target_modules: a list of PEFT module names, or one string ("all-linear", "q_proj,v_proj").
Key lora_targets_key() {
  Key k;
  k.name = "lora.target_modules";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    std::vector<std::string> v;
    if (n.IsScalar()) {
      v = parse_lora_targets(n.Scalar());
    } else if (n.IsSequence()) {
      for (const YAML::Node& e : n) {
        if (!e.IsScalar()) throw InputError(where + ": lora.target_modules must list module names");
        v.push_back(e.Scalar());
      }
    } else {
      throw InputError(where +
                       ": lora.target_modules must be a list of module names or all-linear");
    }
    c.lora.target_modules = std::move(v);
  };
  k.get = [](const TrainConfig& c) { return nlohmann::json(c.lora.target_modules); };
  return k;
}

// Derived defaults: what a key is when not given, where that follows another key.
void default_output_dir(TrainConfig& c) {
  if (!c.output_dir.empty()) return;
  const std::string stem =
      c.source.empty() ? "run" : std::filesystem::path(c.source).stem().string();
  c.output_dir = "out/" + stem;
}

void default_metrics(TrainConfig& c) {
  if (c.metrics.empty()) c.metrics = c.output_dir + "/metrics.jsonl";
}

// The model's directory (for a config.json, the directory it is in).
void default_tokenizer(TrainConfig& c) {
  if (!c.tokenizer.empty()) return;
  const std::filesystem::path m(c.model);
  c.tokenizer = std::filesystem::is_regular_file(m)
                    ? (m.has_parent_path() ? m.parent_path().string() : ".")
                    : c.model;
}

void default_max_seq_len(TrainConfig& c) {
  if (c.max_seq_len == 0) c.max_seq_len = c.max_tokens;
}

void default_reward_timeouts(TrainConfig& c) {
  for (RewardSpec& r : c.rewards)
    if (r.timeout_s == 0.0) r.timeout_s = c.reward_timeout;
}

// offload: parse_offload's reason (an unknown item, 'none' among others) without its flag name.
void offload_parses(const TrainConfig& c, const Key& k) {
  try {
    parse_offload(c.offload);
  } catch (const InputError& e) {
    std::string why = e.what();
    if (why.starts_with("--offload: ")) why.erase(0, 11);
    require(false, c, k.name, "'" + c.offload + "': " + why);
  }
}

// 0 bytes is no budget anyone means: it used to mean "unlimited" without a word.
template <std::string TrainConfig::*budget>
void budget_positive(const TrainConfig& c, const Key& k) {
  const std::string& text = c.*budget;
  const char* absent = budget == &TrainConfig::memory_budget ? "90% of physical memory"
                                                               : "no host budget";
  if (!text.empty())
    require(parse_size(text, c.where(k.name) + ": " + k.name) > 0, c, k.name,
            "must be > 0; omit it for " + std::string(absent));
}

// host_memory_budget: what offloaded checkpoints may use of host memory, so nothing without
// offload (said before its size, the one key's two rules in the order they were always said).
void host_budget_rules(const TrainConfig& c, const Key& k) {
  require(c.host_memory_budget.empty() || c.offload != "none", c, k.name,
          "applies with offload (checkpoints, residual_grad)");
  budget_positive<&TrainConfig::host_memory_budget>(c, k);
}

// optim.betas: [beta1, beta2], each in [0, 1).
Key betas_key() {
  Key k;
  k.name = "optim.betas";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (!n.IsSequence() || n.size() != 2)
      bad_value(where, "optim.betas", "a list [beta1, beta2]", n);
    c.beta1 = as_number(n[0], "optim.betas[0]", where);
    c.beta2 = as_number(n[1], "optim.betas[1]", where);
  };
  k.get = [](const TrainConfig& c) { return nlohmann::json::array({c.beta1, c.beta2}); };
  k.rule = [](const TrainConfig& c, const Key& self) {
    constexpr SettingBound unit_open{.lo = 0.0, .hi = 1.0, .hi_open = true};
    require(within(unit_open, c.beta1) && within(unit_open, c.beta2), c, self.name,
            bound_text(unit_open));
  };
  return k;
}

constexpr SettingBound kFraction{.lo = 0.0, .hi = 1.0, .hi_open = true};  // [0, 1)
constexpr const char* kZeroChoices =
    "must be 0 (replicated optimizer), 1 (sharded AdamW moments) or 2 (sharded gradients too)";

IntegerBound counted_from(int64_t lo, int64_t hi, const char* below) {
  return {.lo = lo, .hi = hi, .below = below};
}
IntegerBound range(int64_t lo, int64_t hi) { return {.lo = lo, .hi = hi}; }

#define KEY(T, name, member) bind<T>(name, [](TrainConfig& c) -> T& { return c.member; })
#define ENUM_KEY(E, name, member, table) \
  enum_key<E>(                           \
      name, [](TrainConfig& c) -> E& { return c.member; }, std::span<const EnumName<E>>(table))
#define AUTO_KEY(E, name, member, table)                                  \
  auto_enum_key<E>(                                                       \
      name, [](TrainConfig& c) -> std::optional<E>& { return c.member; }, \
      std::span<const EnumName<E>>(table))

// Every key in the order docs/TRAINING.md and the error messages list them, each with its bound.
const std::vector<Key>& keys() {
  static const std::vector<Key> table = [] {
    std::vector<Key> k;
    const auto add = [&k](std::vector<Key> rows) {
      for (Key& r : rows) k.push_back(std::move(r));
    };
    add({
        KEY(std::string, "model", model).must_give("a Hugging Face model directory")
            .given_non_empty(),
        KEY(std::string, "tokenizer", tokenizer).given_non_empty().derived(default_tokenizer),
        KEY(std::string, "output_dir", output_dir).given_non_empty().derived(default_output_dir),
        KEY(std::string, "metrics", metrics).given_non_empty().derived(default_metrics),
        KEY(bool, "overwrite_output_dir", overwrite_output_dir),
        AUTO_KEY(DType, "save_dtype", save_dtype, kWeightDTypeNames),
        KEY(std::string, "data.train", data_train).must_give("a JSONL file").given_non_empty(),
        KEY(std::string, "data.eval", data_eval).given_non_empty(),
        KEY(double, "data.eval_fraction", eval_fraction).in(RealBound{kFraction}),
        AUTO_KEY(DataFormat, "data.format", data_format, kDataFormatNames),
        AUTO_KEY(ChatTemplateName, "data.chat_template", chat_template, kChatTemplateNames),
        KEY(std::string, "data.date_string", date_string).given_non_empty(),
        ENUM_KEY(Truncation, "data.truncation", truncation, kTruncationNames),
        KEY(int64_t, "data.max_seq_len", max_seq_len).derived(default_max_seq_len),
        KEY(bool, "data.shuffle", shuffle),
        KEY(bool, "data.append_eos", append_eos),
        AUTO_KEY(bool, "data.add_bos", add_bos, kBoolNames),
        ENUM_KEY(ObjectiveKind, "objective", objective, objective_names()),
    });
    // Every objective's keys, after `objective`.
    for (const ObjectiveTraits* t : objectives_in_key_order()) add(objective_keys(*t));
    add({
        rewards_key().derived(default_reward_timeouts),
        KEY(double, "reward_timeout", reward_timeout)
            .in(RealBound{{.lo = 0.0, .hi = 86400.0, .lo_open = true}, " seconds"}),
        KEY(int64_t, "log_completions_every", log_completions_every)
            .in(range(0, kMaxStepCount)),
        backend_key(),
        ENUM_KEY(Precision, "precision", precision, kPrecisionNames),
        ENUM_KEY(DType, "grad_dtype", grad_dtype, kGradDTypeNames),
        mode_key(),
        chunk_key("layer_chunk", &TrainConfig::layer_chunk)
            .in(counted_from(0, kMaxTokensPerBatch, "must be at least 1, or auto")),
        chunk_key("head_chunk", &TrainConfig::head_chunk)
            .in(counted_from(0, kMaxTokensPerBatch, "must be at least 1, or auto")),
        KEY(std::string, "memory_budget", memory_budget)
            .given_non_empty()
            .with_rule(budget_positive<&TrainConfig::memory_budget>),
        KEY(std::string, "offload", offload).given_non_empty().with_rule(offload_parses),
        KEY(std::string, "host_memory_budget", host_memory_budget)
            .given_non_empty()
            .with_rule(host_budget_rules),
        KEY(int64_t, "max_tokens", max_tokens)
            .in(counted_from(2, kMaxTokensPerBatch, "must be at least 2")),
        KEY(int64_t, "grad_accum", grad_accum)
            .in(counted_from(1, int64_t{1} << 20, "must be at least 1")),
        KEY(int64_t, "epochs", epochs).in(counted_from(1, int64_t{1} << 40, "must be at least 1")),
        KEY(int64_t, "max_steps", max_steps).in(counted_from(0, kMaxStepCount, "must be >= 0")),
        KEY(int64_t, "stop_after_steps", stop_after_steps)
            .in(counted_from(0, kMaxStepCount, "must be >= 0")),
        KEY(int, "threads", threads).in(counted_from(0, 4096, "must be >= 0 (0: all cores)")),
        KEY(uint64_t, "seed", seed),
        KEY(double, "optim.lr", lr).in(RealBound{kPositive}),
        betas_key(),
        KEY(double, "optim.eps", eps).in(RealBound{kPositive}),
        KEY(double, "optim.weight_decay", weight_decay).in(RealBound{kNonNegative}),
        KEY(double, "optim.max_grad_norm", max_grad_norm)
            .in(RealBound{kNonNegative, " (0: no clipping)"}),
        ENUM_KEY(ScheduleKind, "schedule.type", schedule, kScheduleNames),
        KEY(int64_t, "schedule.warmup_steps", warmup_steps)
            .in(counted_from(0, kMaxStepCount, "must be >= 0")),
        KEY(double, "schedule.warmup_ratio", warmup_ratio).in(RealBound{kUnitInterval}),
        KEY(double, "schedule.min_lr_ratio", min_lr_ratio).in(RealBound{kUnitInterval}),
        KEY(int64_t, "eval_every", eval_every).in(counted_from(0, kMaxStepCount, "must be >= 0")),
        KEY(int64_t, "save_every", save_every).in(counted_from(0, kMaxStepCount, "must be >= 0")),
        KEY(int64_t, "keep_last", keep_last)
            .in(counted_from(0, kMaxStepCount, "must be >= 0 (0: keep all)")),
        ENUM_KEY(NonFinitePolicy, "on_nonfinite", on_nonfinite, kNonFiniteNames),
        KEY(int, "dist.zero", dist.zero).in(IntegerBound{.lo = 0, .hi = 2, .outside = kZeroChoices}),
        KEY(int, "dist.context_parallel", dist.context_parallel)
            .in(IntegerBound{
                .lo = 1,
                .hi = 4096,
                .outside = "must be between 1 and 4096 (ranks sharing each sequence)"}),
        KEY(int64_t, "lora.r", lora.r),
        KEY(std::string, "lora.adapter", lora_adapter).given_non_empty(),
        KEY(double, "lora.alpha", lora.alpha),
        KEY(double, "lora.dropout", lora.dropout),
        KEY(bool, "lora.use_rslora", lora.use_rslora),
        lora_targets_key(),
        KEY(int64_t, "demo.seq_len", demo_options.seq_len).in(range(16, int64_t{1} << 20)),
        KEY(int64_t, "demo.steps", demo_options.steps).in(range(1, kMaxStepCount)),
        KEY(int64_t, "demo.eval_every", demo_options.eval_every).in(range(0, kMaxStepCount)),
        KEY(int64_t, "demo.eval_sequences", demo_options.eval_sequences)
            .in(range(0, int64_t{1} << 20)),
        KEY(double, "demo.lr", demo_options.lr).in(RealBound{kPositive}),
        KEY(int64_t, "demo.warmup", demo_options.warmup).in(range(0, kMaxStepCount)),
        KEY(double, "demo.clip", demo_options.clip)
            .in(RealBound{kNonNegative, " (0: no clipping)"}),
        KEY(int64_t, "demo.layer_chunk", demo_options.layer_chunk).in(range(1, int64_t{1} << 20)),
        KEY(int64_t, "demo.head_chunk", demo_options.head_chunk).in(range(1, int64_t{1} << 20)),
        KEY(int64_t, "demo.hidden", demo_options.hidden).in(range(1, int64_t{1} << 16)),
        KEY(int64_t, "demo.layers", demo_options.layers).in(range(1, 4096)),
        KEY(int64_t, "demo.heads", demo_options.heads).in(range(1, 4096)),
        KEY(int64_t, "demo.pairs", demo_options.num_pairs).in(range(1, int64_t{1} << 20)),
        KEY(int64_t, "demo.queries", demo_options.num_queries).in(range(1, int64_t{1} << 20)),
        KEY(int64_t, "demo.filler", demo_options.num_filler).in(range(0, int64_t{1} << 20)),
        KEY(uint64_t, "demo.seed", demo_options.seed),
        KEY(int, "demo.threads", demo_options.threads).in(range(0, 4096)),
        KEY(std::string, "demo.out", demo_options.out).given_non_empty(),
    });
    return k;
  }();
  return table;
}

const Key* find_key(const std::string& name) {
  for (const Key& k : keys())
    if (k.name == name) return &k;
  return nullptr;
}

// "lr, betas, eps, ..." for keys under `prefix` ("" = the top level: sections end in ".").
std::string known_keys(const std::string& prefix) {
  std::vector<std::string> names;
  for (const Key& k : keys()) {
    if (k.name.rfind(prefix, 0) != 0) continue;
    std::string rest = k.name.substr(prefix.size());
    if (const size_t dot = rest.find('.'); dot != std::string::npos)
      rest = rest.substr(0, dot) + ".*";
    if (std::find(names.begin(), names.end(), rest) == names.end()) names.push_back(rest);
  }
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool is_section(const std::string& name) {
  for (const Key& k : keys())
    if (k.name.rfind(name + ".", 0) == 0) return true;
  return false;
}

std::string mark(const std::string& file, const YAML::Node& n) {
  return file + ":" + std::to_string(n.Mark().line + 1);
}

void apply(TrainConfig& c, const std::string& name, const YAML::Node& value,
           const std::string& where) {
  const Key* k = find_key(name);
  if (k->non_empty && (value.IsNull() || (value.IsScalar() && value.Scalar().empty())))
    throw InputError(where + ": " + name + " is empty; give a value, or omit the key for " +
                     "its default");
  k->set(c, value, where);
  c.origin[name] = where;
  if (name.rfind("demo.", 0) == 0) c.demo = true;
}

// `first_line`: the line each setting was first given on. yaml-cpp hands over both of two equal
// keys without a word, so a second `epochs:` further down would silently win: a setting given
// twice is an error naming both lines. (A section may appear twice; its keys are merged.)
void walk(TrainConfig& c, const YAML::Node& map, const std::string& prefix,
          const std::string& file, std::map<std::string, int>& first_line) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string where = mark(file, it->first);
    if (!it->first.IsScalar()) throw InputError(where + ": keys must be names");
    const std::string name = prefix + it->first.Scalar();
    if (find_key(name)) {
      const int line = it->first.Mark().line + 1;
      if (auto [seen, fresh] = first_line.emplace(name, line); !fresh)
        throw InputError(where + ": duplicate key '" + name + "' (first on line " +
                         std::to_string(seen->second) + ")");
      apply(c, name, it->second, mark(file, it->second.IsNull() ? it->first : it->second));
    } else if (is_section(name)) {
      if (name == "demo") {
        c.demo = true;
        c.origin["demo"] = where;
      }
      if (it->second.IsNull()) continue;  // an empty section
      if (!it->second.IsMap())
        throw InputError(where + ": " + name + " must be a mapping of keys (" +
                         known_keys(name + ".") + ")");
      walk(c, it->second, name + ".", file, first_line);
    } else {
      const std::string section =
          prefix.empty() ? "" : " under " + prefix.substr(0, prefix.size() - 1);
      throw InputError(where + ": unknown key '" + name + "' (known keys" + section + ": " +
                       known_keys(prefix) + ")");
    }
  }
}

void apply_override(TrainConfig& c, const std::string& arg) {
  const std::string where = "override '" + arg + "'";
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(where + ": expected key=value (e.g. optim.lr=1e-4)");
  const std::string name = arg.substr(0, eq);
  if (!find_key(name)) {
    // The known keys of its section, or of the top level when the section is unknown too.
    const size_t dot = name.rfind('.');
    std::string prefix = dot == std::string::npos ? "" : name.substr(0, dot + 1);
    if (!prefix.empty() && !is_section(prefix.substr(0, prefix.size() - 1))) prefix.clear();
    throw InputError(where + ": unknown key '" + name + "' (known keys" +
                     (prefix.empty() ? "" : " under " + prefix.substr(0, prefix.size() - 1)) +
                     ": " + known_keys(prefix) + ")");
  }
  YAML::Node value;
  try {
    value = YAML::Load(arg.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw InputError(where + ": not a YAML value: " + e.msg);
  }
  apply(c, name, value, where);
}

// The rules that are about several keys, each named for what it keeps from happening; every key
// alone has been checked by then (check_key). Each names the key to change.
void check_max_seq_len(const TrainConfig& c) {
  require(c.max_seq_len >= 2 && c.max_seq_len <= c.max_tokens, c, "data.max_seq_len",
          "must be between 2 and max_tokens (" + std::to_string(c.max_tokens) + ")");
}

void check_one_held_out_set(const TrainConfig& c) {
  require(c.data_eval.empty() || c.eval_fraction == 0.0, c, "data.eval_fraction",
          "cannot be combined with data.eval (one held-out set)");
}

// The budgets are what `auto` chunks plan with, and nothing else reads them: with both chunks
// fixed a budget would be accepted and mean nothing.
void check_budgets_have_auto_chunks(const TrainConfig& c) {
  for (const auto& [key, text] : {std::pair<const char*, const std::string&>{"memory_budget",
                                                                            c.memory_budget},
                                  {"host_memory_budget", c.host_memory_budget}})
    require(text.empty() || c.layer_chunk == 0 || c.head_chunk == 0, c, key,
            "is what auto chunks plan with; layer_chunk and head_chunk are both fixed, so "
            "nothing would use it (set one of them to auto, or omit " + std::string(key) + ")");
}

void check_context_parallel_mode(const TrainConfig& c) {
  require(c.dist.context_parallel == 1 || c.mode.layers != LayerMode::store, c,
          "dist.context_parallel",
          "runs the stream and checkpoint modes, not base (store keeps every activation of the "
          "whole sequence on every rank)");
}

// Every online objective's temperature, top_p, top_k and min_p, as the sampler takes them.
void check_sampling(const TrainConfig& c) {
  for (const ObjectiveTraits* t : objectives_in_key_order()) {
    if (!t->rollouts) continue;
    const std::string obj = t->name;
    const RolloutSettings& r = c.rollouts.at(t->kind);
    SamplingParams p{false, r.temperature, r.top_k, r.top_p, r.min_p};
    try {
      p.validate(obj);
    } catch (const InputError& e) {
      throw InputError(c.where(obj + ".temperature") + ": " + e.what());
    }
  }
}

// lora.adapter: the adapter's r, lora_alpha, target_modules and use_rslora become the run's;
// lora.* keys given beside it must agree.
void take_lora_adapter(TrainConfig& c) {
  if (c.lora_adapter.empty()) return;
  const LoraConfig a = read_lora_config(c.lora_adapter);  // errors name the file
  auto agree = [&](const char* key, bool same, const std::string& theirs) {
    if (c.origin.count(key) && !same)
      throw InputError(c.where(key) + ": " + key + " disagrees with " + c.lora_adapter +
                       "/adapter_config.json (" + theirs + ")");
  };
  agree("lora.r", c.lora.r == a.r, "r " + std::to_string(a.r));
  agree("lora.alpha", c.lora.alpha == a.alpha, "lora_alpha " + std::to_string(a.alpha));
  agree("lora.use_rslora", c.lora.use_rslora == a.use_rslora,
        std::string("use_rslora ") + (a.use_rslora ? "true" : "false"));
  bool same_targets = true;
  for (int p = 0; p < kLoraTargets; ++p)
    same_targets = same_targets && c.lora.targets(static_cast<LoraTarget>(p)) ==
                                       a.targets(static_cast<LoraTarget>(p));
  agree("lora.target_modules", same_targets, "target_modules " + a.describe());
  c.lora.r = a.r;
  c.lora.alpha = a.alpha;
  c.lora.use_rslora = a.use_rslora;
  c.lora.target_modules = a.target_modules;
}

// Full fine-tuning: adapter settings given beside it would be ignored without a word (a missing
// or zero lora.r in a config meant for LoRA trains every weight instead). Keys at their default
// change nothing and pass (a stored config lists every key).
void check_lora_settings_used(const TrainConfig& c) {
  if (c.lora.r != 0) return;
  const LoraConfig defaults;
  std::string ignored, first;
  auto given = [&](const char* key, bool changed) {
    if (!changed || !c.origin.count(key)) return;
    ignored += (ignored.empty() ? "" : ", ") + std::string(key);
    if (first.empty()) first = key;
  };
  given("lora.alpha", c.lora.alpha != defaults.alpha);
  given("lora.dropout", c.lora.dropout != defaults.dropout);
  given("lora.use_rslora", c.lora.use_rslora != defaults.use_rslora);
  given("lora.target_modules", c.lora.target_modules != defaults.target_modules);
  if (!ignored.empty())
    throw InputError(c.where(first) + ": " + ignored + " would be ignored: lora.r is 0 " +
                     "(full fine-tuning); set lora.r to train LoRA adapters, or remove " +
                     (ignored.find(',') == std::string::npos ? "it" : "them"));
}

void check_lora(const TrainConfig& c) {
  if (c.lora.r == 0) return;
  try {
    c.lora.validate();
  } catch (const InputError& e) {
    throw InputError(c.where("lora.r") + ": " + e.what());
  }
}

// The demo trains its own model on its own task: the keys that name another would be ignored.
void check_demo_alone(const TrainConfig& c) {
  for (const char* k : {"model", "data.train", "data.eval", "objective"}) {
    if (c.origin.count(k))
      throw InputError(c.where(k) + ": " + k +
                       " cannot be combined with the demo section (the demo "
                       "trains its own model on its own task)");
  }
  const DemoOptions& d = c.demo_options;
  require(d.steps >= 1 && d.seq_len >= 16, c, "demo", "needs steps >= 1 and seq_len >= 16");
}

// A run's keys are the demo's (demo.*) or everything else's.
bool in_run(const Key& k, const TrainConfig& c) { return k.name.starts_with("demo.") == c.demo; }

void fill_defaults_and_validate(TrainConfig& c) {
  if (c.demo) check_demo_alone(c);
  for (const Key& k : keys())
    if (k.derive && in_run(k, c)) k.derive(c);
  for (const Key& k : keys())
    if (in_run(k, c)) check_key(k, c);
  if (c.demo) return;
  for (void (*check)(const TrainConfig&) :
       {check_max_seq_len, check_one_held_out_set, check_budgets_have_auto_chunks, check_context_parallel_mode, check_sampling})
    check(c);
  take_lora_adapter(c);
  check_lora_settings_used(c);
  check_lora(c);
}

}  // namespace

std::string TrainConfig::where(const std::string& key) const {
  if (auto it = origin.find(key); it != origin.end()) return it->second;
  return source.empty() ? "config" : source;
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const Key& k : keys()) {
    if (!demo && k.name.rfind("demo.", 0) == 0) continue;
    j[k.name] = k.get(*this);
  }
  j["demo"] = demo;
  return j;
}

ObjectiveSetup TrainConfig::objective_setup() const {
  ObjectiveSetup s = objective_settings;
  s.kind = objective;
  return s;
}

ExecConfig TrainConfig::exec() const {
  ExecConfig e = mode;
  e.act_dtype = storage_dtype(precision);
  e.layer_chunk = layer_chunk;
  e.head_chunk = head_chunk;
  e.offload = parse_offload(offload);
  return e;
}

std::vector<TrainConfig::Input> TrainConfig::inputs() const {
  std::vector<Input> in = {{"model", model, false},
                           {"tokenizer", tokenizer, false},
                           {"data.train", data_train, true, data_train_text.get()},
                           {"data.eval", data_eval, true, data_eval_text.get()},
                           {"lora.adapter", lora_adapter, false}};
  for (const ObjectiveTraits* t : objectives_in_key_order())
    for (const ObjectiveSetting& row : t->settings)
      if (is_model_dir(row.type)) in.push_back({row.key, model_dirs.at(row.key), false});
  return in;
}

TrainConfig::ModelDir TrainConfig::model_dir(SettingType type) const {
  static const std::string none;
  for (const ObjectiveSetting& row : objective_traits(objective).settings)
    if (row.type == type) return {row.key, model_dirs.at(row.key)};
  return {"", none};
}

const RolloutSettings& TrainConfig::rollout() const {
  static const RolloutSettings offline;
  const auto it = rollouts.find(objective);
  return it != rollouts.end() ? it->second : offline;
}

std::map<std::string, std::string> objective_model_dirs() {
  std::map<std::string, std::string> dirs;
  for (const ObjectiveTraits* t : all_objectives())
    for (const ObjectiveSetting& row : t->settings)
      if (is_model_dir(row.type)) dirs[row.key] = "";
  return dirs;
}

std::map<ObjectiveKind, RolloutSettings> objective_rollouts() {
  std::map<ObjectiveKind, RolloutSettings> rollouts;
  for (const ObjectiveTraits* t : all_objectives()) {
    if (!t->rollouts) continue;
    RolloutSettings r;
    if (t->group != SequenceGroup::configured) r.num_generations = 1;
    rollouts.emplace(t->kind, r);
  }
  return rollouts;
}

std::vector<std::string> resume_identity_keys() {
  return {"data.train",         "data.eval",
          "data.eval_fraction", "data.format",
          "data.chat_template", "data.date_string",
          "data.truncation",    "data.max_seq_len",
          "data.shuffle",       "data.append_eos",
          "data.add_bos",       "max_tokens",
          "grad_accum",         "seed",
          "objective",          "tokenizer"};
}

TrainConfig load_train_config(const std::string& yaml_path,
                              const std::vector<std::string>& overrides) {
  TrainConfig c;
  c.source = yaml_path;
  if (!yaml_path.empty()) {
    YAML::Node root;
    try {
      check_input_file(yaml_path);
      root = YAML::LoadFile(yaml_path);
    } catch (const YAML::BadFile&) {
      throw InputError(yaml_path + ": cannot open config file");
    } catch (const YAML::ParserException& e) {
      throw InputError(yaml_path + ":" + std::to_string(e.mark.line + 1) +
                       ": not valid YAML: " + e.msg);
    }
    if (!root.IsNull()) {
      if (!root.IsMap())
        throw InputError(yaml_path + ": expected a mapping of keys at the top level");
      std::map<std::string, int> first_line;
      walk(c, root, "", yaml_path, first_line);
    }
  }
  for (const std::string& o : overrides) apply_override(c, o);
  fill_defaults_and_validate(c);
  return c;
}

TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& where,
                                   const std::vector<std::string>& overrides) {
  TrainConfig c;
  c.source = where;
  if (!j.is_object()) throw InputError(where + ": config is not an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "demo") {
      c.demo = it.value().is_boolean() && it.value().get<bool>();
      continue;
    }
    const Key* k = find_key(it.key());
    if (!k) throw InputError(where + ": unknown key '" + it.key() + "' in the stored config");
    YAML::Node value;
    try {
      value = YAML::Load(it.value().dump());
    } catch (const YAML::Exception& e) {
      throw InputError(where + ": stored config key '" + it.key() + "': " + e.msg);
    }
    k->set(c, value, where);
    c.origin[it.key()] = where;
  }
  const std::string stored_output_dir = c.output_dir;
  for (const std::string& o : overrides) apply_override(c, o);
  // The stored metrics path was derived from the stored output_dir: a resume into another
  // output_dir writes its metrics there too, unless the metrics path itself is overridden.
  const auto metrics_origin = c.origin.find("metrics");
  if (c.output_dir != stored_output_dir && metrics_origin != c.origin.end() &&
      metrics_origin->second == where &&
      c.metrics == stored_output_dir + "/metrics.jsonl")
    c.metrics.clear();
  fill_defaults_and_validate(c);
  return c;
}

}  // namespace sbp
