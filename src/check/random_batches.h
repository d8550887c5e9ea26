#pragma once
// The batch source of `gradcheck` and `bench` (and of the tests that check the engine the same
// way): random token batches of an objective's shape, random rewards, and the perturbed copies
// of a model that serve as reference models. Nothing here is an objective: the step runner
// (step/step_runner.h) runs the real ones on what this makes.
#include <cstdint>

#include "core/batch.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/parameters.h"
#include "objective/objective_setup.h"
#include "step/micro_batch.h"

namespace sbp::cli {

// T tokens split into `segments` sequences of unequal lengths (deterministic from the seed),
// random ids; with `random_mask`, about a third of the targets are masked out.
// InputError unless every one of `segments` sequences of a T-token batch can have >= 2 tokens:
// more sequences than T/2 leave sequences of one token, which have no target (gradcheck then
// compared losses of 0 and passed), so the --segments flag is refused instead of clamped.
void check_segments(int64_t T, int64_t segments);

Batch random_batch(int64_t vocab, int64_t T, int64_t segments, uint64_t seed, bool random_mask);

// A random batch of the objective's shape: SFT as random_batch; DPO (chosen, rejected) pairs
// that share a prompt; GRPO groups of `group_size` completions that share a prompt; PPO prompt +
// completion sequences. Loss masks mark the completions; every segment has >= 2 tokens and at
// least one scored row. `segments` is rounded to what the shape needs (even for DPO; for GRPO a
// multiple of the group size, at least one group; at most T / 2). InputError if T < 4 (every
// objective but SFT).
Batch random_objective_batch(ObjectiveKind kind, int64_t group_size, int64_t vocab, int64_t T,
                             int64_t segments, uint64_t seed);

// Segments per group: DPO pairs (2), GRPO groups (group_size, at most `sequences`), else 1.
int64_t objective_group(ObjectiveKind kind, int64_t group_size, int64_t sequences);

// The batch as a micro-batch of the objective: for GRPO and PPO one reward per segment, drawn
// normal(0, 1) from the seed; GRPO's group size as random_objective_batch made it.
MicroBatch random_micro_batch(ObjectiveKind kind, int64_t group_size, Batch batch, uint64_t seed);

// A copy of `model` + noise * N(0, 1) per element (category weights, F32): the reference model
// of a check or a benchmark (noise > 0: the KL terms are not zero).
ParameterSet make_reference_weights(const ModelConfig& cfg, const ParameterSet& model, Pool& pool,
                                    float noise, uint64_t seed);

}  // namespace sbp::cli
