#include "train/value_model_init.h"

#include <filesystem>

#include "core/error.h"
#include "model/checkpoint_io.h"
#include "model/value_model_io.h"
#include "train/checkpoint.h"

namespace sbp {

namespace fs = std::filesystem;

namespace {

// The value model directory's config (ppo.value_model), or the policy's.
ModelConfig fresh_value_config(const TrainConfig& c, const ModelConfig& policy) {
  const TrainConfig::ModelDir value = c.model_dir(SettingType::value_model_dir);
  if (value.dir.empty()) return policy;
  const std::string where = c.where(value.key) + ": " + value.key + ": ";
  const fs::path dir(value.dir);
  if (!fs::is_directory(dir) || !fs::exists(dir / "config.json"))
    throw InputError(where + value.dir +
                     " is not a Hugging Face model directory (config.json + "
                     "model.safetensors with score.weight, e.g. a Qwen3ForSequenceClassification)");
  ModelConfig v;
  try {
    v = load_config(value.dir);
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
  if (v.vocab_size != policy.vocab_size)
    throw InputError(where + value.dir + " has vocab_size " + std::to_string(v.vocab_size) +
                     ", the policy " + std::to_string(policy.vocab_size) +
                     " (they must share the tokenizer)");
  return v;
}

}  // namespace

ModelConfig value_model_config(const TrainConfig& c, const ModelConfig& policy,
                               const std::string& ckpt) {
  if (ckpt.empty()) return fresh_value_config(c, policy);
  const std::string dir = ckpt + "/" + kValueModelDir;
  if (!fs::exists(fs::path(dir) / "config.json"))
    throw InputError(dir + ": missing (the checkpoint holds no PPO value model)");
  const ModelConfig v = load_config(dir);
  if (v.vocab_size != policy.vocab_size)
    throw InputError(dir + "/config.json: the value model's vocab_size differs from the policy's");
  return v;
}

void check_ppo_value_model(const TrainConfig& c, const ModelConfig& policy) {
  const TrainConfig::ModelDir value = c.model_dir(SettingType::value_model_dir);
  if (value.dir.empty()) return;
  const ModelConfig cfg = fresh_value_config(c, policy);
  try {
    check_value_weights(value.dir, cfg);
  } catch (const InputError& e) {
    throw InputError(c.where(value.key) + ": " + value.key + ": " + e.what());
  }
}

std::string init_value_weights(const TrainConfig& c, const std::string& start_dir,
                               const ModelConfig& cfg, ParameterSet& weights) {
  const TrainConfig::ModelDir value = c.model_dir(SettingType::value_model_dir);
  if (!value.dir.empty()) {
    try {
      load_value_weights(value.dir, cfg, weights);
    } catch (const InputError& e) {
      throw InputError(c.where(value.key) + ": " + value.key + ": " + e.what());
    }
    return value.dir;
  }
  if (!start_dir.empty()) {
    load_value_weights(start_dir, cfg, weights, /*init_missing_head=*/true, c.seed);
    return "the starting model's trunk, score head drawn from seed " + std::to_string(c.seed);
  }
  init_parameters(weights, c.seed + 1, InitStyle::hf);
  return "random weights (seed " + std::to_string(c.seed + 1) + ")";
}

}  // namespace sbp
