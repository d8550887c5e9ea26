#pragma once
// Packing examples into micro-batches (DESIGN §2 "Sequences and masks"): every sequence becomes
// its own segment of one packed token stream, so no example ever attends to another and no
// padding is computed. A micro-batch holds whole examples only (a DPO pair or a GRPO group is
// never split) and at most `max_tokens` tokens.
#include <cstdint>
#include <span>
#include <vector>

#include "core/batch.h"
#include "core/rng.h"
#include "data/dataset.h"

namespace sbp {

struct MicroBatchPlan {
  std::vector<int64_t> examples;  // indices into the example list, in packing order
  int64_t tokens = 0;
};

// 0, 1, ..., n-1: the order of an unshuffled epoch.
std::vector<int64_t> identity_order(int64_t n);
// The order examples are visited in one epoch: 0..n-1, or a Fisher-Yates shuffle drawn from rng.
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, Rng& rng);

// Greedy, in `order`: an example joins the current micro-batch while the total stays within
// max_tokens, else it starts the next one. Deterministic; every example appears exactly once.
// Throws InputError if one example alone exceeds max_tokens (the loader rules that out).
std::vector<MicroBatchPlan> pack_examples(std::span<const Example> examples,
                                          std::span<const int64_t> order, int64_t max_tokens);

struct PackedBatch {
  Batch batch;                           // segments: each example's sequences, in plan order
  std::vector<int64_t> segment_example;  // (segments) index of the example each came from
  std::vector<double> segment_reward;    // (segments) rollout reward, 0 otherwise
  int64_t loss_tokens() const;           // tokens predicted with weight, over all segments
};

PackedBatch assemble_batch(std::span<const Example> examples, const MicroBatchPlan& plan);

}  // namespace sbp
