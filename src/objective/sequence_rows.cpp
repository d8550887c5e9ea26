#include "objective/sequence_rows.h"

#include <cstdint>
#include <string>

#include "core/error.h"

namespace sbp {

SequenceRows::SequenceRows(const Batch& batch) {
  weight = batch.target_weights();
  const size_t S = batch.seq_lens.size();
  segment.resize(weight.size());
  begin.resize(S + 1);
  weight_sum.assign(S, 0.0);
  int64_t row = 0;
  for (size_t s = 0; s < S; ++s) {
    begin[s] = row;
    for (int64_t i = 0; i < batch.seq_lens[s]; ++i, ++row) {
      segment[static_cast<size_t>(row)] = static_cast<int32_t>(s);
      weight_sum[s] += weight[static_cast<size_t>(row)];
    }
    total_weight += weight_sum[s];
  }
  begin[S] = row;
}

std::vector<int32_t> offsets_i32(std::span<const int64_t> begin) {
  SBP_CHECK(begin.empty() || (begin.front() >= 0 && begin.back() <= INT32_MAX),
            "offsets_i32: sequence offsets beyond int32");
  return std::vector<int32_t>(begin.begin(), begin.end());
}

void SequenceRows::scale_weights(std::span<const double> coef, int64_t row_begin,
                                 std::span<float> out) const {
  SBP_CHECK(row_begin >= 0 && row_begin + static_cast<int64_t>(out.size()) <= num_rows() &&
                coef.size() == weight_sum.size(),
            "sequence rows: rows or coefficients outside the batch");
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t t = static_cast<size_t>(row_begin) + i;
    out[i] = static_cast<float>(coef[static_cast<size_t>(segment[t])] * weight[t]);
  }
}

Batch prompt_completion_batch(const std::vector<PromptCompletion>& seqs) {
  Batch b;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const PromptCompletion& s = seqs[i];
    if (s.completion.empty())
      throw InputError("sequence " + std::to_string(i) + ": empty completion");
    b.tokens.insert(b.tokens.end(), s.prompt.begin(), s.prompt.end());
    b.tokens.insert(b.tokens.end(), s.completion.begin(), s.completion.end());
    b.loss_mask.insert(b.loss_mask.end(), s.prompt.size(), 0.0f);
    b.loss_mask.insert(b.loss_mask.end(), s.completion.size(), 1.0f);
    b.seq_lens.push_back(static_cast<int64_t>(s.prompt.size() + s.completion.size()));
  }
  return b;
}

}  // namespace sbp
