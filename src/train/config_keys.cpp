#include "train/config_keys.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/exec_config.h"
#include "plan/size_arg.h"

namespace sbp {

namespace {

// Step counts share the trainer state's bound (what a JSON number holds exactly); tokens per
// micro-batch are bounded by the attention kernels' int32 positions.
constexpr int64_t kMaxStepCount = int64_t{1} << 53;
constexpr int64_t kMaxTokensPerBatch = int64_t{1} << 31;

// layer_chunk / head_chunk: a number of tokens, or `auto` (stored as 0): the largest size whose
// step fits memory_budget (train/auto_chunks.h).
ConfigKey chunk_key(const std::string& name, int64_t TrainConfig::*member) {
  ConfigKey k;
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

constexpr EnumName<bool> kBoolNames[] = {{true, "true"}, {false, "false"}};

// mode: a preset or layers+head (engine/exec_config.h); the chunk sizes are separate keys.
ConfigKey mode_key() {
  ConfigKey k;
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

// context.rope_scaling (train/context_extension.h): a mapping in config.json's rope_scaling
// spelling, its values YAML scalars read as what they look like (true/false, numbers, strings);
// `none` or `default`: the default rope.
ConfigKey context_rope_scaling_key() {
  ConfigKey k;
  k.name = "context.rope_scaling";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    const std::string key = "context.rope_scaling";
    // "": unset (a stored config lists every key, the unset ones as "").
    if (n.IsScalar() && n.Scalar().empty()) {
      c.context.set_rope = false;
      c.context.rope_scaling = nullptr;
      return;
    }
    c.context.set_rope = true;
    if (n.IsNull() || (n.IsScalar() && (n.Scalar() == "none" || n.Scalar() == "default"))) {
      c.context.rope_scaling = nullptr;
      return;
    }
    if (!n.IsMap()) bad_value(where, key, "a mapping (rope_type: yarn, factor: 4, ...) or none", n);
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : n) {
      const std::string field = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      if (!v.IsScalar()) bad_value(where, key + "." + field, "a number, true/false or a name", v);
      const std::string s = v.Scalar();
      if (s == "true" || s == "false") {
        j[field] = s == "true";
        continue;
      }
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) {
        const bool integral = s.find_first_of(".eE") == std::string::npos;
        j[field] = integral ? nlohmann::json(static_cast<int64_t>(d)) : nlohmann::json(d);
      } else {
        j[field] = s;
      }
    }
    c.context.rope_scaling = j;
  };
  k.get = [](const TrainConfig& c) {
    return c.context.set_rope ? (c.context.rope_scaling.is_null() ? nlohmann::json("none")
                                                                  : c.context.rope_scaling)
                              : nlohmann::json("");
  };
  return k;
}

ConfigKey backend_key() {
  ConfigKey k;
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
ConfigKey rewards_key() {
  ConfigKey k;
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
ConfigKey rollout_stop_key(const std::string& section, Of of) {
  ConfigKey k;
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

// report_to: the dashboards the metrics lines also go to, as TRL's TrainingArguments names them
// (`tensorboard`, `wandb`; `none` or an empty list: none), a string or a list. Written by the
// Python package (python/streambp/_report.py): the program refuses the key (cli/cmd_train.cpp).
ConfigKey report_to_key() {
  ConfigKey k;
  k.name = "report_to";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    std::vector<std::string> given;
    if (n.IsScalar()) {
      given.push_back(n.Scalar());
    } else if (n.IsSequence()) {
      for (const YAML::Node& e : n) {
        if (!e.IsScalar()) throw InputError(where + ": report_to must list names");
        given.push_back(e.Scalar());
      }
    } else {
      throw InputError(where + ": report_to must be a name or a list of names");
    }
    std::vector<std::string> v;
    for (const std::string& s : given) {
      if (s == "none") {
        if (given.size() > 1) throw InputError(where + ": report_to: 'none' with other names");
        continue;
      }
      if (s != "tensorboard" && s != "wandb")
        throw InputError(where + ": report_to: unknown '" + s +
                         "' (known: tensorboard, wandb, none)");
      if (std::find(v.begin(), v.end(), s) != v.end())
        throw InputError(where + ": report_to: '" + s + "' given twice");
      v.push_back(s);
    }
    c.report_to = std::move(v);
  };
  k.get = [](const TrainConfig& c) { return nlohmann::json(c.report_to); };
  return k;
}

// An online objective's rollout settings (RolloutSettings) as keys of its section. How sampling's
// numbers go together (temperature, top_p, top_k, min_p) is a check of several keys
// (check_sampling).
std::vector<ConfigKey> rollout_keys(const ObjectiveTraits& t) {
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
  const auto group_of_one = [obj, of](const TrainConfig& c, const ConfigKey& k) {
    require_key(of(const_cast<TrainConfig&>(c)).num_generations != 1, c, k.name,
                "is 1: " + obj +
                    " compares each completion with the others of its prompt's group, and a group "
                    "of one has no advantage (its std is undefined); use at least 2");
  };
#define ROLLOUT_KEY(T, field) \
  field_key<T>(obj + "." #field, [of](TrainConfig& c) -> T& { return of(c).field; })
  ConfigKey num_generations = ROLLOUT_KEY(int64_t, num_generations)
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
ConfigKey setting_key(const ObjectiveSetting& row) {
  const std::string name = row.key;
  switch (row.type) {
    case SettingType::number:
      return field_key<double>(name,
                               [number = row.number](TrainConfig& c) -> double& {
                                 return number(c.objective_settings);
                               })
          .in(RealBound{row.bound});
    case SettingType::choice: {
      ConfigKey k;
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
  return field_key<std::string>(
      name, [name](TrainConfig& c) -> std::string& { return c.model_dirs.at(name); });
}

// An objective's keys: its setting rows, and an online objective's rollout keys after its
// reference key (where the key lists have always had them), or after its rows.
std::vector<ConfigKey> objective_keys(const ObjectiveTraits& t) {
  std::vector<ConfigKey> k;
  bool rollouts_to_add = t.rollouts;
  for (const ObjectiveSetting& row : t.settings) {
    k.push_back(setting_key(row));
    if (rollouts_to_add && row.type == SettingType::reference_dir) {
      const std::vector<ConfigKey> r = rollout_keys(t);
      k.insert(k.end(), r.begin(), r.end());
      rollouts_to_add = false;
    }
  }
  if (rollouts_to_add) {
    const std::vector<ConfigKey> r = rollout_keys(t);
    k.insert(k.end(), r.begin(), r.end());
  }
  return k;
}

// lora.target_modules: a list of PEFT module names, or one string ("all-linear", "q_proj,v_proj").
ConfigKey lora_targets_key() {
  ConfigKey k;
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
void offload_parses(const TrainConfig& c, const ConfigKey& k) {
  try {
    parse_offload(c.offload);
  } catch (const InputError& e) {
    std::string why = e.what();
    if (why.starts_with("--offload: ")) why.erase(0, 11);
    require_key(false, c, k.name, "'" + c.offload + "': " + why);
  }
}

// 0 bytes is no budget anyone means: it used to mean "unlimited" without a word.
template <std::string TrainConfig::*budget>
void budget_positive(const TrainConfig& c, const ConfigKey& k) {
  const std::string& text = c.*budget;
  const char* absent =
      budget == &TrainConfig::memory_budget ? "90% of physical memory" : "no host budget";
  if (!text.empty())
    require_key(parse_size(text, c.where(k.name) + ": " + k.name) > 0, c, k.name,
                "must be > 0; omit it for " + std::string(absent));
}

// host_memory_budget: what offloaded checkpoints may use of host memory, so nothing without
// offload (said before its size, the one key's two rules in the order they were always said).
void host_budget_rules(const TrainConfig& c, const ConfigKey& k) {
  require_key(c.host_memory_budget.empty() || c.offload != "none", c, k.name,
              "applies with offload (checkpoints, residual_grad)");
  budget_positive<&TrainConfig::host_memory_budget>(c, k);
}

// optim.betas: [beta1, beta2], each in [0, 1).
ConfigKey betas_key() {
  ConfigKey k;
  k.name = "optim.betas";
  k.set = [](TrainConfig& c, const YAML::Node& n, const std::string& where) {
    if (!n.IsSequence() || n.size() != 2)
      bad_value(where, "optim.betas", "a list [beta1, beta2]", n);
    c.beta1 = as_number(n[0], "optim.betas[0]", where);
    c.beta2 = as_number(n[1], "optim.betas[1]", where);
  };
  k.get = [](const TrainConfig& c) { return nlohmann::json::array({c.beta1, c.beta2}); };
  k.rule = [](const TrainConfig& c, const ConfigKey& self) {
    constexpr SettingBound unit_open{.lo = 0.0, .hi = 1.0, .hi_open = true};
    require_key(within(unit_open, c.beta1) && within(unit_open, c.beta2), c, self.name,
                bound_text(unit_open));
  };
  return k;
}

constexpr SettingBound kFraction{.lo = 0.0, .hi = 1.0, .hi_open = true};  // [0, 1)
constexpr const char* kZeroChoices =
    "must be 0 (replicated optimizer), 1 (sharded AdamW moments), 2 (sharded gradients too) or "
    "3 (sharded weights too)";

IntegerBound counted_from(int64_t lo, int64_t hi, const char* below) {
  return {.lo = lo, .hi = hi, .below = below};
}
IntegerBound range(int64_t lo, int64_t hi) { return {.lo = lo, .hi = hi}; }

#define KEY(T, name, member) field_key<T>(name, [](TrainConfig& c) -> T& { return c.member; })
#define ENUM_KEY(E, name, member, table) \
  enum_key<E>(                           \
      name, [](TrainConfig& c) -> E& { return c.member; }, std::span<const EnumName<E>>(table))
#define AUTO_KEY(E, name, member, table)                                  \
  auto_enum_key<E>(                                                       \
      name, [](TrainConfig& c) -> std::optional<E>& { return c.member; }, \
      std::span<const EnumName<E>>(table))

}  // namespace

std::vector<const ObjectiveTraits*> objectives_in_key_order() {
  std::vector<const ObjectiveTraits*> v;
  for (const bool online : {false, true})
    for (const ObjectiveTraits* t : all_objectives())
      if (t->rollouts == online) v.push_back(t);
  return v;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> table = [] {
    std::vector<ConfigKey> k;
    const auto add = [&k](std::vector<ConfigKey> rows) {
      for (ConfigKey& r : rows) k.push_back(std::move(r));
    };
    add({
        KEY(std::string, "model", model)
            .must_give("a Hugging Face model directory")
            .given_non_empty(),
        KEY(std::string, "tokenizer", tokenizer).given_non_empty().derived(default_tokenizer),
        KEY(std::string, "output_dir", output_dir).given_non_empty().derived(default_output_dir),
        KEY(std::string, "metrics", metrics).given_non_empty().derived(default_metrics),
        report_to_key(),
        KEY(bool, "overwrite_output_dir", overwrite_output_dir),
        AUTO_KEY(DType, "save_dtype", save_dtype, kWeightDTypeNames),
        context_rope_scaling_key(),
        KEY(int64_t, "context.max_position_embeddings", context.max_position_embeddings)
            .in(IntegerBound{.lo = 0, .hi = kMaxPositionEmbeddings,
                             .outside = "must be between 1 and 2^31 (0: the model's own)"}),
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
        KEY(int64_t, "log_completions_every", log_completions_every).in(range(0, kMaxStepCount)),
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
        KEY(int, "dist.zero", dist.zero)
            .in(IntegerBound{.lo = 0, .hi = 3, .outside = kZeroChoices}),
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

const ConfigKey* find_config_key(const std::string& name) {
  for (const ConfigKey& k : config_keys())
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace sbp
