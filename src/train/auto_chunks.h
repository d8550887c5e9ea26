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
  int64_t layer_chunk = 0;  // rows per chunk the step will use
  int64_t head_chunk = 0;
  int64_t planned_peak = 0;  // bytes: the planned step, every model the objective holds included
  int64_t budget = 0;        // memory_budget in bytes
};

// Plans a step of `max_tokens` tokens of the config's objective as this trainer runs it, with
// every model it holds (step/model_set.h): weights in the precision's dtype (with fp32 master
// weights for bf16), gradients in grad_dtype and AdamW moments of the policy (and of PPO's
// value model), a reference model's weights (dpo, grpo with beta > 0, ppo; planned with the
// policy's shape), activations in `exec.act_dtype`, `exec`'s offload (host_memory_budget bounds
// the host's share), and with dist.context_parallel the busiest rank of a context group
// (its own rows only). The budget is
// `memory_budget` (default: 90% of physical memory). Fixed sizes in the config stay as they
// are. With `ranks` > 1 the plan is one rank's: gradients and optimizer state divided as
// ZeRO stage `dist.zero` divides them (the budget is per rank, as each rank has its own memory).
// Throws InputError naming memory_budget when even the smallest auto chunks do not fit.
// Online GRPO/PPO: `longest_prompt` > 0 plans the generation phase too (a group of
// num_generations completions of max_completion_length new tokens after the longest prompt,
// decoded together, with their KV cache).
ResolvedChunks resolve_auto_chunks(const TrainConfig& c, const ModelConfig& cfg,
                                   const ExecConfig& exec, int ranks = 1,
                                   int64_t longest_prompt = 0);

// Physical memory of this machine in bytes (0 if unknown).
int64_t physical_memory_bytes();

}  // namespace sbp
