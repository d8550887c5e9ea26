#pragma once
// A micro-batch: one packed stream of T tokens made of variable-length sequences
// (segments). A token attends causally within its own segment only; positions restart per
// segment; the last token of a segment has no target. No padding is ever computed.
#include <cstdint>
#include <string>
#include <vector>

namespace sbp {

struct Batch {
  std::vector<int32_t> tokens;    // (T) all segments back to back
  std::vector<int64_t> seq_lens;  // segment lengths, each >= 1, summing to T
  // (T) per token as a TARGET: weight of predicting token t from the tokens before it
  // (Hugging Face `labels` semantics). Empty = every token that has a predecessor counts.
  std::vector<float> loss_mask;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Throws InputError (prefixed by `where`) on inconsistent lengths or ids outside [0, vocab).
  void validate(int64_t vocab, const std::string& where = "batch") const;

  // Row t predicts token t+1 of the same segment: its id, or -1 at a segment's last token.
  std::vector<int32_t> targets() const;
  // Row t's loss weight: loss_mask[t+1] (1 if the mask is empty), 0 where there is no target.
  std::vector<float> target_weights() const;
  // Position of each token within its segment, and the first row of its segment.
  std::vector<int32_t> positions() const;
  std::vector<int32_t> segment_starts() const;
  // Sum of target_weights(): the number of loss tokens for 0/1 masks.
  double loss_weight_sum() const;

  // Appends another batch's segments (packing).
  void append(const Batch& other);
};

}  // namespace sbp
