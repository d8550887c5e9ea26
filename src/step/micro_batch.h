#pragma once
// What one optimizer step trains on, as the step runner (step_runner.h) takes it from any batch
// source: the trainer's packed epochs (train/), the random batches of gradcheck and bench and
// the token files of score (src/cli/), the shape-only batches of the planner (plan/).
#include <cstdint>
#include <vector>

#include "core/batch.h"

namespace sbp {

// One micro-batch: a packed batch and the per-sequence / per-token constants its objective
// needs beyond the tokens.
struct MicroBatch {
  Batch batch;
  // (S) one per segment: GRPO's rewards, PPO's scores; empty for SFT and DPO.
  std::vector<float> rewards;
  // GRPO: completions per prompt; the segments come in groups of this many consecutive ones,
  // and every micro-batch of a step has the same group size.
  int64_t group_size = 0;
  // (T) GRPO/PPO: the log-probs of the policy that sampled the completions (a generator's, or a
  // rollout file's). Empty: the current policy's, detached (GRPO: ratio 1; PPO: scored at the
  // start of the step, before any backward).
  std::vector<float> old_logp;
  // (T) PPO: the value model's values at sampling time. Empty: computed at the start of the
  // step, before any backward.
  std::vector<float> old_values;
};

// This rank's share of one optimizer step: micro-batch i of the step goes to rank i % ranks, and
// every rank runs `slots` = ceil(step_micro_batches / ranks) slots, an empty last one where it
// has no micro-batch, so that the ranks' collectives match (dist/data_parallel.h).
struct StepBatches {
  std::vector<MicroBatch> micro;   // this rank's micro-batches, in step order
  std::vector<int64_t> index;      // the position of each among the step's micro-batches
  int64_t step_micro_batches = 0;  // of the whole step, every rank
  int64_t slots = 0;

  // The whole step on one process.
  static StepBatches whole(std::vector<MicroBatch> micro);
};

}  // namespace sbp
