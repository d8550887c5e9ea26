#pragma once
// PPO's value model as the trainer holds it: its own fp32 weights, gradients and AdamW moments
// (same optimizer settings and LR schedule as the policy, its gradient norm clipped on its
// own), all in the run's ledger, and the engine that streams it (Engine::values for the
// rollout's old values, Engine::forward_backward with PpoValueObjective for its update).
//
// Where its weights start (a fresh run; a resumed one loads checkpoint-N/value_model/):
//   ppo.value_model set     that Hugging Face directory (model.* + score.weight, e.g. a
//                           Qwen3ForSequenceClassification with num_labels 1)
//   model is a directory    the starting model's trunk, the score head drawn from `seed`
//                           (load_value_weights with init_missing_head)
//   model is a config/preset  random weights, init_parameters from seed + 1 (so the trunk is
//                           not the policy's own draw)
#include <string>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/data_parallel.h"
#include "engine/engine.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "train/train_config.h"

namespace sbp {

class TrainedValueModel {
 public:
  // Allocates weights (uninitialised), zeroed gradients and zeroed moments in `pool`.
  TrainedValueModel(const ModelConfig& cfg, Pool& pool, Backend& be, const ExecConfig& exec,
                    const AdamWConfig& optim);
  // The same under data parallelism: gradients and optimizer as `comm` and `zero` shard them.
  TrainedValueModel(const ModelConfig& cfg, Pool& pool, Backend& be, const ExecConfig& exec,
                    const AdamWConfig& optim, Communicator& comm, int zero);
  TrainedValueModel(const TrainedValueModel&) = delete;
  TrainedValueModel& operator=(const TrainedValueModel&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ParameterSet& weights() { return weights_; }
  const ParameterSet& grads() const { return parallel_.grads(); }
  AdamW& optimizer() { return parallel_.adamw(); }  // unsharded (one process or zero 0)
  DataParallel& parallel() { return parallel_; }
  Engine& engine() { return engine_; }

 private:
  ModelConfig cfg_;
  ParameterSet weights_;   // fp32, Category::weights
  DataParallel parallel_;  // fp32 gradients (Category::grads), AdamW moments (optimizer)
  Engine engine_;
};

// The value model's shape: ppo.value_model's config.json, else the policy's. Throws InputError
// naming ppo.value_model when it is not a model directory or its vocabulary differs.
ModelConfig ppo_value_config(const TrainConfig& c, const ModelConfig& policy);

// Checks ppo.value_model (when set) before anything is allocated or printed: its config and
// its tensors' names and shapes (the safetensors headers only). InputError naming the key.
void check_ppo_value_model(const TrainConfig& c, const ModelConfig& policy);

// Fills the weights of a fresh run (see the table above); `start_dir` is the starting model's
// directory ("" when randomly initialised), `cfg` ppo_value_config's. Returns where they came
// from, for the log. Errors from ppo.value_model's files name the key.
std::string init_value_weights(const TrainConfig& c, const std::string& start_dir, const ModelConfig& cfg,
                               ParameterSet& weights);

}  // namespace sbp
