#pragma once
// Where PPO's value model comes from in a training run. Its weights, gradients and AdamW
// moments are the run's ModelSet's (step/model_set.h): same optimizer settings and LR schedule
// as the policy, its gradient norm clipped on its own.
//
// Where its weights start (a fresh run; a resumed one loads checkpoint-N/value_model/):
//   ppo.value_model set     that Hugging Face directory (model.* + score.weight, e.g. a
//                           Qwen3ForSequenceClassification with num_labels 1)
//   model is a directory    the starting model's trunk, the score head drawn from `seed`
//                           (load_value_weights with init_missing_head)
//   model is a config/preset  random weights, init_parameters from seed + 1 (so the trunk is
//                           not the policy's own draw)
#include <string>

#include "model/config.h"
#include "model/parameters.h"
#include "train/train_config.h"

namespace sbp {

// The value model's shape: a resumed run's checkpoint-N/value_model/config.json (`ckpt` not
// empty), else ppo.value_model's config.json, else the policy's. Throws InputError naming
// ppo.value_model (or the checkpoint's file) when it is not a model directory or its vocabulary
// differs from the policy's.
ModelConfig value_model_config(const TrainConfig& c, const ModelConfig& policy,
                               const std::string& ckpt);

// Checks ppo.value_model (when set) before anything is allocated or printed: its config and
// its tensors' names and shapes (the safetensors headers only). InputError naming the key.
void check_ppo_value_model(const TrainConfig& c, const ModelConfig& policy);

// Fills the weights of a fresh run (see the table above); `start_dir` is the starting model's
// directory ("" when randomly initialised), `cfg` value_model_config's. Returns where they came
// from, for the log. Errors from ppo.value_model's files name the key.
std::string init_value_weights(const TrainConfig& c, const std::string& start_dir,
                               const ModelConfig& cfg, ParameterSet& weights);

}  // namespace sbp
