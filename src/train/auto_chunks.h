#pragma once
// `layer_chunk: auto` / `head_chunk: auto` in a training config: the largest chunk sizes whose
// step fits the run's memory budget, chosen by the same shape-only planning as `streambp plan`
// (plan/planner.h choose_chunks: bigger chunks run faster, so take the largest that fit).
#include <cstdint>

#include "engine/exec_config.h"
#include "model/config.h"
#include "train/train_config.h"

namespace sbp {

struct ResolvedChunks {
  int64_t layer_chunk = 0;    // rows per chunk the step will use
  int64_t head_chunk = 0;
  int64_t planned_peak = 0;   // bytes: the planned step (policy weights, grads, AdamW, activations)
  int64_t budget = 0;         // bytes available to it: memory_budget minus the other models
  int64_t other_models = 0;   // bytes of the reference / value models the objective holds
};

// Plans a step of `max_tokens` tokens as this trainer runs it: fp32 weights, gradients and
// AdamW moments, activations in `exec.act_dtype`. The budget is `memory_budget` (default: 90%
// of physical memory) minus the weights of a reference model (dpo, grpo with beta > 0, ppo) and
// the weights, gradients and moments of PPO's value model. Fixed sizes in the config stay as
// they are. With `ranks` > 1 the plan is one rank's: gradients and optimizer state divided as
// ZeRO stage `dist.zero` divides them (the budget is per rank, as each rank has its own memory).
// Throws InputError naming memory_budget when even the smallest auto chunks do not fit.
ResolvedChunks resolve_auto_chunks(const TrainConfig& c, const ModelConfig& cfg, const ExecConfig& exec,
                                   int ranks = 1);

// Physical memory of this machine in bytes (0 if unknown).
int64_t physical_memory_bytes();

}  // namespace sbp
