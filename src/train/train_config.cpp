#include "train/train_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/input_file.h"
#include "engine/exec_config.h"
#include "engine/sampling.h"
#include "model/lora_io.h"
#include "train/config_keys.h"

namespace sbp {

namespace {

// "lr, betas, eps, ..." for keys under `prefix` ("" = the top level: sections end in ".").
std::string known_keys(const std::string& prefix) {
  std::vector<std::string> names;
  for (const ConfigKey& k : config_keys()) {
    if (!k.name.starts_with(prefix)) continue;
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
  for (const ConfigKey& k : config_keys())
    if (k.name.starts_with(name + ".")) return true;
  return false;
}

std::string mark(const std::string& file, const YAML::Node& n) {
  return file + ":" + std::to_string(n.Mark().line + 1);
}

void apply(TrainConfig& c, const std::string& name, const YAML::Node& value,
           const std::string& where) {
  const ConfigKey* k = find_config_key(name);
  if (k->non_empty && (value.IsNull() || (value.IsScalar() && value.Scalar().empty())))
    throw InputError(where + ": " + name + " is empty; give a value, or omit the key for " +
                     "its default");
  k->set(c, value, where);
  c.origin[name] = where;
  if (name.starts_with("demo.")) c.demo = true;
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
    if (find_config_key(name)) {
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
  if (!find_config_key(name)) {
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
  require_key(c.max_seq_len >= 2 && c.max_seq_len <= c.max_tokens, c, "data.max_seq_len",
              "must be between 2 and max_tokens (" + std::to_string(c.max_tokens) + ")");
}

void check_one_held_out_set(const TrainConfig& c) {
  require_key(c.data_eval.empty() || c.eval_fraction == 0.0, c, "data.eval_fraction",
              "cannot be combined with data.eval (one held-out set)");
}

// The budgets are what `auto` chunks plan with, and nothing else reads them: with both chunks
// fixed a budget would be accepted and mean nothing.
void check_budgets_have_auto_chunks(const TrainConfig& c) {
  for (const auto& [key, text] :
       {std::pair<const char*, const std::string&>{"memory_budget", c.memory_budget},
        {"host_memory_budget", c.host_memory_budget}})
    require_key(text.empty() || c.layer_chunk == 0 || c.head_chunk == 0, c, key,
                "is what auto chunks plan with; layer_chunk and head_chunk are both fixed, so "
                "nothing would use it (set one of them to auto, or omit " +
                    std::string(key) + ")");
}

void check_context_parallel_mode(const TrainConfig& c) {
  require_key(c.dist.context_parallel == 1 || c.mode.layers != LayerMode::store, c,
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
  require_key(d.steps >= 1 && d.seq_len >= 16, c, "demo", "needs steps >= 1 and seq_len >= 16");
}

// A run's keys are the demo's (demo.*) or everything else's.
bool in_run(const ConfigKey& k, const TrainConfig& c) {
  return k.name.starts_with("demo.") == c.demo;
}

void fill_defaults_and_validate(TrainConfig& c) {
  if (c.demo) check_demo_alone(c);
  for (const ConfigKey& k : config_keys())
    if (k.derive && in_run(k, c)) k.derive(c);
  for (const ConfigKey& k : config_keys())
    if (in_run(k, c)) check_key(k, c);
  if (c.demo) return;
  for (void (*check)(const TrainConfig&) :
       {check_max_seq_len, check_one_held_out_set, check_budgets_have_auto_chunks,
        check_context_parallel_mode, check_sampling})
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
  for (const ConfigKey& k : config_keys()) {
    if (!demo && k.name.starts_with("demo.")) continue;
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
    const ConfigKey* k = find_config_key(it.key());
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
