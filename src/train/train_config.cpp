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

// One configuration key: how to set it from YAML and how to read it back.
struct Key {
  std::string name;
  std::function<void(TrainConfig&, const YAML::Node&, const std::string&)> set;
  std::function<nlohmann::json(const TrainConfig&)> get;
};

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
      bool typed = false;
      for (auto it = r.begin(); it != r.end(); ++it) {
        const std::string key = it->first.Scalar(), name = at + "." + key;
        const YAML::Node v = it->second;  // a handle: it->second is a temporary
        if (key == "type") {
          spec.type = parse_reward_type(as_string(v, name, where), where + ": " + at);
          typed = true;
        } else if (key == "name") spec.name = as_string(v, name, where);
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
      if (!typed)
        throw InputError(where + ": " + at + ": type is required (" + reward_type_list() + ")");
      if (spec.name.empty()) spec.name = reward_type_name(spec.type);
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

// An online objective's rollout settings (RolloutSettings) as keys of its section.
std::vector<Key> rollout_keys(const ObjectiveTraits& t) {
  const std::string obj = t.name;
  const auto of = [kind = t.kind](TrainConfig& c) -> RolloutSettings& {
    return c.rollouts.at(kind);
  };
#define ROLLOUT_KEY(T, field) \
  sbp::bind<T>(obj + "." #field, [of](TrainConfig& c) -> T& { return of(c).field; })
  return {ROLLOUT_KEY(int64_t, num_generations),     ROLLOUT_KEY(int64_t, prompts_per_step),
          ROLLOUT_KEY(int64_t, max_completion_length), ROLLOUT_KEY(int64_t, num_iterations),
          ROLLOUT_KEY(double, temperature),          ROLLOUT_KEY(double, top_p),
          ROLLOUT_KEY(int64_t, top_k),               ROLLOUT_KEY(double, min_p),
          ROLLOUT_KEY(bool, mask_truncated_completions), rollout_stop_key(obj, of)};
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
      });
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

#define KEY(T, name, member) bind<T>(name, [](TrainConfig& c) -> T& { return c.member; })
#define ENUM_KEY(E, name, member, table) \
  enum_key<E>(                           \
      name, [](TrainConfig& c) -> E& { return c.member; }, std::span<const EnumName<E>>(table))
#define AUTO_KEY(E, name, member, table)                                  \
  auto_enum_key<E>(                                                       \
      name, [](TrainConfig& c) -> std::optional<E>& { return c.member; }, \
      std::span<const EnumName<E>>(table))

const std::vector<Key>& keys() {
  static const std::vector<Key> table = [] {
    std::vector<Key> k = {
        KEY(std::string, "model", model),
        KEY(std::string, "tokenizer", tokenizer),
        KEY(std::string, "output_dir", output_dir),
        KEY(std::string, "metrics", metrics),
        KEY(bool, "overwrite_output_dir", overwrite_output_dir),
        AUTO_KEY(DType, "save_dtype", save_dtype, kWeightDTypeNames),
        KEY(std::string, "data.train", data_train),
        KEY(std::string, "data.eval", data_eval),
        KEY(double, "data.eval_fraction", eval_fraction),
        AUTO_KEY(DataFormat, "data.format", data_format, kDataFormatNames),
        AUTO_KEY(ChatTemplateName, "data.chat_template", chat_template, kChatTemplateNames),
        KEY(std::string, "data.date_string", date_string),
        ENUM_KEY(Truncation, "data.truncation", truncation, kTruncationNames),
        KEY(int64_t, "data.max_seq_len", max_seq_len),
        KEY(bool, "data.shuffle", shuffle),
        KEY(bool, "data.append_eos", append_eos),
        AUTO_KEY(bool, "data.add_bos", add_bos, kBoolNames),
        ENUM_KEY(ObjectiveKind, "objective", objective, objective_names()),
    };
    // Every objective's keys, after `objective`.
    for (const ObjectiveTraits* t : objectives_in_key_order()) {
      const std::vector<Key> o = objective_keys(*t);
      k.insert(k.end(), o.begin(), o.end());
    }
    const std::vector<Key> rest = {
        rewards_key(),
        KEY(double, "reward_timeout", reward_timeout),
        KEY(int64_t, "log_completions_every", log_completions_every),
        backend_key(),
        ENUM_KEY(Precision, "precision", precision, kPrecisionNames),
        ENUM_KEY(DType, "grad_dtype", grad_dtype, kGradDTypeNames),
        mode_key(),
        chunk_key("layer_chunk", &TrainConfig::layer_chunk),
        chunk_key("head_chunk", &TrainConfig::head_chunk),
        KEY(std::string, "memory_budget", memory_budget),
        KEY(std::string, "offload", offload),
        KEY(std::string, "host_memory_budget", host_memory_budget),
        KEY(int64_t, "max_tokens", max_tokens),
        KEY(int64_t, "grad_accum", grad_accum),
        KEY(int64_t, "epochs", epochs),
        KEY(int64_t, "max_steps", max_steps),
        KEY(int64_t, "stop_after_steps", stop_after_steps),
        KEY(int, "threads", threads),
        KEY(uint64_t, "seed", seed),
        KEY(double, "optim.lr", lr),
        KEY(double, "optim.eps", eps),
        KEY(double, "optim.weight_decay", weight_decay),
        KEY(double, "optim.max_grad_norm", max_grad_norm),
        ENUM_KEY(ScheduleKind, "schedule.type", schedule, kScheduleNames),
        KEY(int64_t, "schedule.warmup_steps", warmup_steps),
        KEY(double, "schedule.warmup_ratio", warmup_ratio),
        KEY(double, "schedule.min_lr_ratio", min_lr_ratio),
        KEY(int64_t, "eval_every", eval_every),
        KEY(int64_t, "save_every", save_every),
        KEY(int64_t, "keep_last", keep_last),
        ENUM_KEY(NonFinitePolicy, "on_nonfinite", on_nonfinite, kNonFiniteNames),
        KEY(int, "dist.zero", dist.zero),
        KEY(int, "dist.context_parallel", dist.context_parallel),
        KEY(int64_t, "lora.r", lora.r),
        KEY(std::string, "lora.adapter", lora_adapter),
        KEY(double, "lora.alpha", lora.alpha),
        KEY(double, "lora.dropout", lora.dropout),
        KEY(bool, "lora.use_rslora", lora.use_rslora),
        lora_targets_key(),
        KEY(int64_t, "demo.seq_len", demo_options.seq_len),
        KEY(int64_t, "demo.steps", demo_options.steps),
        KEY(int64_t, "demo.eval_every", demo_options.eval_every),
        KEY(int64_t, "demo.eval_sequences", demo_options.eval_sequences),
        KEY(double, "demo.lr", demo_options.lr),
        KEY(int64_t, "demo.warmup", demo_options.warmup),
        KEY(double, "demo.clip", demo_options.clip),
        KEY(int64_t, "demo.layer_chunk", demo_options.layer_chunk),
        KEY(int64_t, "demo.head_chunk", demo_options.head_chunk),
        KEY(int64_t, "demo.hidden", demo_options.hidden),
        KEY(int64_t, "demo.layers", demo_options.layers),
        KEY(int64_t, "demo.heads", demo_options.heads),
        KEY(int64_t, "demo.pairs", demo_options.num_pairs),
        KEY(int64_t, "demo.queries", demo_options.num_queries),
        KEY(int64_t, "demo.filler", demo_options.num_filler),
        KEY(uint64_t, "demo.seed", demo_options.seed),
        KEY(int, "demo.threads", demo_options.threads),
        KEY(std::string, "demo.out", demo_options.out),
    };
    k.insert(k.end(), rest.begin(), rest.end());
    // optim.betas: [beta1, beta2]
    Key betas;
    betas.name = "optim.betas";
    betas.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
      if (!n.IsSequence() || n.size() != 2)
        bad_value(where, "optim.betas", "a list [beta1, beta2]", n);
      c.beta1 = as_number(n[0], "optim.betas[0]", where);
      c.beta2 = as_number(n[1], "optim.betas[1]", where);
    };
    betas.get = [](const TrainConfig& c) { return nlohmann::json::array({c.beta1, c.beta2}); };
    const auto lr =
        std::find_if(k.begin(), k.end(), [](const Key& x) { return x.name == "optim.lr"; });
    k.insert(lr + 1, betas);
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

// String keys whose absence has a default (or means "none") and whose empty value has no
// meaning of its own: `output_dir: ''` used to fall back to out/<config name> without a word.
// Only what the user writes is checked (a YAML file, an override, Python's keywords): a stored
// config lists every key, the unset ones as "". The model directories of the objective rows
// are not here: their "" is documented (the starting model).
constexpr const char* kNonEmptyKeys[] = {
    "model",      "tokenizer",          "output_dir",       "metrics",
    "data.train", "data.eval",          "data.date_string", "memory_budget",
    "offload",    "host_memory_budget", "lora.adapter",     "demo.out"};

void apply(TrainConfig& c, const std::string& name, const YAML::Node& value,
           const std::string& where) {
  const Key* k = find_key(name);
  if (std::find(std::begin(kNonEmptyKeys), std::end(kNonEmptyKeys), name) !=
          std::end(kNonEmptyKeys) &&
      (value.IsNull() || (value.IsScalar() && value.Scalar().empty())))
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

void check_integer_ranges(const TrainConfig& c) {
  require_range(c, "max_tokens", c.max_tokens, 2, kMaxTokensPerBatch);
  require_range(c, "layer_chunk", c.layer_chunk, 0, kMaxTokensPerBatch);
  require_range(c, "head_chunk", c.head_chunk, 0, kMaxTokensPerBatch);
  require_range(c, "grad_accum", c.grad_accum, 1, int64_t{1} << 20);
  require_range(c, "epochs", c.epochs, 1, int64_t{1} << 40);
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"max_steps", c.max_steps},
                               {"stop_after_steps", c.stop_after_steps},
                               {"schedule.warmup_steps", c.warmup_steps},
                               {"eval_every", c.eval_every},
                               {"save_every", c.save_every},
                               {"keep_last", c.keep_last}})
    require_range(c, key, v, 0, kMaxStepCount);
  require_range(c, "threads", c.threads, 0, 4096);
}

void check_demo_ranges(const TrainConfig& c) {
  const DemoOptions& d = c.demo_options;
  require(d.steps >= 1 && d.seq_len >= 16, c, "demo", "needs steps >= 1 and seq_len >= 16");
  require_range(c, "demo.seq_len", d.seq_len, 16, int64_t{1} << 20);
  require_range(c, "demo.steps", d.steps, 1, kMaxStepCount);
  require_range(c, "demo.eval_every", d.eval_every, 0, kMaxStepCount);
  require_range(c, "demo.eval_sequences", d.eval_sequences, 0, int64_t{1} << 20);
  require_range(c, "demo.warmup", d.warmup, 0, kMaxStepCount);
  require_range(c, "demo.layer_chunk", d.layer_chunk, 1, int64_t{1} << 20);
  require_range(c, "demo.head_chunk", d.head_chunk, 1, int64_t{1} << 20);
  require(d.lr > 0.0, c, "demo.lr", "must be positive");
  require(d.clip >= 0.0, c, "demo.clip", "must be >= 0 (0: no clipping)");
  require_range(c, "demo.hidden", d.hidden, 1, int64_t{1} << 16);
  require_range(c, "demo.layers", d.layers, 1, 4096);
  require_range(c, "demo.heads", d.heads, 1, 4096);
  require_range(c, "demo.pairs", d.num_pairs, 1, int64_t{1} << 20);
  require_range(c, "demo.queries", d.num_queries, 1, int64_t{1} << 20);
  require_range(c, "demo.filler", d.num_filler, 0, int64_t{1} << 20);
  require_range(c, "demo.threads", d.threads, 0, 4096);
}

void fill_defaults_and_validate(TrainConfig& c) {
  if (c.demo) {
    for (const char* k : {"model", "data.train", "data.eval", "objective"}) {
      if (c.origin.count(k))
        throw InputError(c.where(k) + ": " + k +
                         " cannot be combined with the demo section (the demo "
                         "trains its own model on its own task)");
    }
    check_demo_ranges(c);
    return;
  }
  require(!c.model.empty(), c, "model", "is required (a Hugging Face model directory)");
  require(!c.data_train.empty(), c, "data.train", "is required (a JSONL file)");
  if (c.output_dir.empty()) {
    const std::string stem =
        c.source.empty() ? "run" : std::filesystem::path(c.source).stem().string();
    c.output_dir = "out/" + stem;
  }
  if (c.metrics.empty()) c.metrics = c.output_dir + "/metrics.jsonl";
  if (c.tokenizer.empty()) {
    // The model's directory (for a config.json, the directory it is in).
    const std::filesystem::path m(c.model);
    c.tokenizer = std::filesystem::is_regular_file(m)
                      ? (m.has_parent_path() ? m.parent_path().string() : ".")
                      : c.model;
  }
  require(c.max_tokens >= 2, c, "max_tokens", "must be at least 2");
  if (c.max_seq_len == 0) c.max_seq_len = c.max_tokens;
  require(c.max_seq_len >= 2 && c.max_seq_len <= c.max_tokens, c, "data.max_seq_len",
          "must be between 2 and max_tokens (" + std::to_string(c.max_tokens) + ")");
  require(c.eval_fraction >= 0.0 && c.eval_fraction < 1.0, c, "data.eval_fraction",
          "must be in [0, 1)");
  require(c.data_eval.empty() || c.eval_fraction == 0.0, c, "data.eval_fraction",
          "cannot be combined with data.eval (one held-out set)");
  try {
    parse_offload(c.offload);
  } catch (const InputError& e) {
    // parse_offload's reason (an unknown item, 'none' among others) without its flag name.
    std::string why = e.what();
    if (why.rfind("--offload: ", 0) == 0) why.erase(0, 11);
    require(false, c, "offload", "'" + c.offload + "': " + why);
  }
  require(c.host_memory_budget.empty() || c.offload != "none", c, "host_memory_budget",
          "applies with offload (checkpoints, residual_grad)");
  // 0 bytes is no budget anyone means: it used to mean "unlimited" without a word.
  for (const auto& [key, text, absent] :
       {std::tuple<const char*, const std::string&, const char*>{"memory_budget", c.memory_budget,
                                                                 "90% of physical memory"},
        {"host_memory_budget", c.host_memory_budget, "no host budget"}})
    if (!text.empty())
      require(parse_size(text, c.where(key) + ": " + key) > 0, c, key,
              "must be > 0; omit it for " + std::string(absent));
  // The budgets are what `auto` chunks plan with, and nothing else reads them: with both chunks
  // fixed a budget would be accepted and mean nothing.
  for (const auto& [key, text] : {std::pair<const char*, const std::string&>{"memory_budget",
                                                                            c.memory_budget},
                                  {"host_memory_budget", c.host_memory_budget}})
    require(text.empty() || c.layer_chunk == 0 || c.head_chunk == 0, c, key,
            "is what auto chunks plan with; layer_chunk and head_chunk are both fixed, so "
            "nothing would use it (set one of them to auto, or omit " + std::string(key) + ")");
  require(c.layer_chunk >= 0, c, "layer_chunk", "must be at least 1, or auto");
  require(c.head_chunk >= 0, c, "head_chunk", "must be at least 1, or auto");
  require(c.grad_accum >= 1, c, "grad_accum", "must be at least 1");
  require(c.epochs >= 1, c, "epochs", "must be at least 1");
  require(c.max_steps >= 0, c, "max_steps", "must be >= 0");
  require(c.stop_after_steps >= 0, c, "stop_after_steps", "must be >= 0");
  require(c.threads >= 0, c, "threads", "must be >= 0 (0: all cores)");
  require(c.lr > 0.0, c, "optim.lr", "must be positive");
  require(c.beta1 >= 0.0 && c.beta1 < 1.0 && c.beta2 >= 0.0 && c.beta2 < 1.0, c, "optim.betas",
          "must be in [0, 1)");
  require(c.eps > 0.0, c, "optim.eps", "must be positive");
  require(c.weight_decay >= 0.0, c, "optim.weight_decay", "must be >= 0");
  require(c.max_grad_norm >= 0.0, c, "optim.max_grad_norm", "must be >= 0 (0: no clipping)");
  require(c.warmup_steps >= 0, c, "schedule.warmup_steps", "must be >= 0");
  require(c.warmup_ratio >= 0.0 && c.warmup_ratio <= 1.0, c, "schedule.warmup_ratio",
          "must be in [0, 1]");
  require(c.min_lr_ratio >= 0.0 && c.min_lr_ratio <= 1.0, c, "schedule.min_lr_ratio",
          "must be in [0, 1]");
  require(c.eval_every >= 0, c, "eval_every", "must be >= 0");
  require(c.save_every >= 0, c, "save_every", "must be >= 0");
  require(c.keep_last >= 0, c, "keep_last", "must be >= 0 (0: keep all)");
  require(
      c.dist.zero >= 0 && c.dist.zero <= 2, c, "dist.zero",
      "must be 0 (replicated optimizer), 1 (sharded AdamW moments) or 2 (sharded gradients too)");
  require(c.dist.context_parallel >= 1 && c.dist.context_parallel <= 4096, c,
          "dist.context_parallel", "must be between 1 and 4096 (ranks sharing each sequence)");
  require(c.dist.context_parallel == 1 || c.mode.layers != LayerMode::store, c, "dist.context_parallel",
          "runs the stream and checkpoint modes, not base (store keeps every activation of the "
          "whole sequence on every rank)");
  for (const ObjectiveTraits* t : objectives_in_key_order())
    for (const ObjectiveSetting& row : t->settings)
      if (row.type == SettingType::number)
        require(within(row.bound, row.number(c.objective_settings)), c, row.key,
                bound_text(row.bound));
  for (const ObjectiveTraits* t : objectives_in_key_order()) {
    if (!t->rollouts) continue;
    const std::string obj = t->name;
    const RolloutSettings& r = c.rollouts.at(t->kind);
    // An objective whose advantage compares a completion with the others of its prompt's group
    // (GRPO) has no advantage for a group of one: the group's std is undefined (0/0 with the
    // unbiased std TRL uses, so every advantage and then the loss is NaN). TRL refuses
    // num_generations < 2 for GRPO in its config too. PPO's advantages are per token (GAE), so
    // one completion per prompt is its default.
    const bool compares_in_group = t->group == SequenceGroup::configured;
    if (compares_in_group)
      require(r.num_generations != 1, c, obj + ".num_generations",
              "is 1: " + obj +
                  " compares each completion with the others of its prompt's group, and a "
                  "group of one has no advantage (its std is undefined); use at least 2");
    require_range(c, obj + ".num_generations", r.num_generations, compares_in_group ? 2 : 1,
                  4096);
    require_range(c, obj + ".prompts_per_step", r.prompts_per_step, 1, int64_t{1} << 20);
    require_range(c, obj + ".max_completion_length", r.max_completion_length, 1, kMaxTokensPerBatch);
    require_range(c, obj + ".num_iterations", r.num_iterations, 1, 1024);
    require_range(c, obj + ".top_k", r.top_k, 0, kMaxTokensPerBatch);
    SamplingParams p{false, r.temperature, r.top_k, r.top_p, r.min_p};
    try {
      p.validate(obj);
    } catch (const InputError& e) {
      throw InputError(c.where(obj + ".temperature") + ": " + e.what());
    }
  }
  require(c.reward_timeout > 0.0 && c.reward_timeout <= 86400.0, c, "reward_timeout",
          "must be in (0, 86400] seconds");
  require_range(c, "log_completions_every", c.log_completions_every, 0, kMaxStepCount);
  for (RewardSpec& r : c.rewards)
    if (r.timeout_s == 0.0) r.timeout_s = c.reward_timeout;
  check_integer_ranges(c);
  if (!c.lora_adapter.empty()) {
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
  if (c.lora.r == 0) {
    // Full fine-tuning: adapter settings given beside it would be ignored without a word (a
    // missing or zero lora.r in a config meant for LoRA trains every weight instead). Keys at
    // their default change nothing and pass (a stored config lists every key).
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
  if (c.lora.r != 0) {
    try {
      c.lora.validate();
    } catch (const InputError& e) {
      throw InputError(c.where("lora.r") + ": " + e.what());
    }
  }
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
