#include "objective/sft.h"

#include "core/error.h"

namespace sbp {

SftObjective::SftObjective(const Batch& batch, double normalizer) {
  weights_ = batch.target_weights();
  const double inv = normalizer > 0.0 ? 1.0 / normalizer : 0.0;
  for (float& w : weights_) w = static_cast<float>(w * inv);
}

void SftObjective::token_grads(int64_t row_begin, std::span<const float> logp,
                               std::span<float> dlogp) {
  SBP_CHECK(row_begin >= 0 && row_begin + static_cast<int64_t>(logp.size()) <=
                                  static_cast<int64_t>(weights_.size()),
            "sft: rows outside the batch");
  for (size_t i = 0; i < logp.size(); ++i) {
    const float w = weights_[static_cast<size_t>(row_begin) + i];
    dlogp[i] = -w;
    loss_ -= static_cast<double>(w) * logp[i];
  }
}

}  // namespace sbp
