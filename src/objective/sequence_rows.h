#pragma once
// Per-row bookkeeping that the sequence-level objectives (DPO, GRPO, PPO) share: which
// segment each row of the packed batch belongs to, the row's target weight (the completion
// mask: Batch::target_weights, 0 on prompt rows and on each segment's last row), and per-segment
// sums of those weights. Built once per micro-batch, before the step; T + S numbers.
#include <cstdint>
#include <span>
#include <vector>

#include "core/batch.h"

namespace sbp {

struct SequenceRows {
  std::vector<int32_t> segment;    // (T) segment index of each row
  std::vector<float> weight;       // (T) target weight m_t (0 where the row has no target)
  std::vector<int64_t> begin;      // (S + 1) first row of each segment, then T
  std::vector<double> weight_sum;  // (S) sum of m_t over the segment's rows
  double total_weight = 0.0;       // sum of m_t over the batch

  explicit SequenceRows(const Batch& batch);
  int64_t num_rows() const { return static_cast<int64_t>(segment.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(weight_sum.size()); }
  // out[i] = float(coef[segment] * m) of rows row_begin + i: the gradient of a loss that is a
  // function of per-sequence weighted log-prob sums (DPO, KTO, ORPO after their pre-pass).
  // Throws Error if the rows leave the batch.
  void scale_weights(std::span<const double> coef, int64_t row_begin, std::span<float> out) const;
};

// Sequence offsets (S + 1, as SequenceRows::begin) in the int32 the backends' sequence kernels
// take (objective_kernels.h's sequence_token_grads, objective_kernels.h's kto_kl_part). Throws
// Error if T does not fit.
std::vector<int32_t> offsets_i32(std::span<const int64_t> begin);

// One sequence made of a prompt and a completion. Only the completion is scored: the packed
// segment is prompt + completion, with loss_mask 1 on the completion tokens, so that the rows
// predicting them (from the last prompt token on) carry the weight.
struct PromptCompletion {
  std::vector<int32_t> prompt;      // may be empty (then the first completion token is unscored)
  std::vector<int32_t> completion;  // >= 1 token
};

// Packs the sequences in order as segments of one batch. Throws InputError if a sequence is
// empty.
Batch prompt_completion_batch(const std::vector<PromptCompletion>& seqs);

}  // namespace sbp
