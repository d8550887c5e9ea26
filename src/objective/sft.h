#pragma once
// Supervised fine-tuning: L = -sum_t m_t logp_t / N, where N is the loss weight of the WHOLE
// optimizer step (all micro-batches, all ranks) — never a mean of per-micro-batch means — so
// gradient accumulation over micro-batches equals one big batch.
#include <vector>

#include "core/batch.h"
#include "objective/objective.h"

namespace sbp {

class SftObjective final : public Objective {
 public:
  // normalizer: the step's total loss weight (sum of Batch::loss_weight_sum over micro-batches).
  // `batch` must outlive the objective: row weights are read from it as the rows come, not
  // copied into a (T) table (T can be 10^8 in a plan, and a plan never asks for them).
  SftObjective(const Batch& batch, double normalizer);

  // dlogp = -w needs no log-prob (head_route.h ConstantGrads); the loss adds -w logp in row
  // order when the pass's log-probs come.
  HeadRoute route() override;
  // Both halves at once, for a caller that has the log-probs now: the same numbers.
  void token_grads(int64_t row_begin, std::span<const float> logp, std::span<float> dlogp);
  void constant_grads(int64_t row_begin, std::span<float> dlogp);
  void add_logp(int64_t row_begin, std::span<const float> logp);

  // This micro-batch's share of the step loss, accumulated over the rows seen so far.
  double loss() const override { return loss_; }
  std::vector<std::span<double>> pass_sums() override { return {{&loss_, 1}}; }

 private:
  // fn(i, w) for rows row_begin + i, i < n, with w the row's weight m / N (as a float).
  template <typename Fn>
  void for_each_weight(int64_t row_begin, int64_t n, Fn fn) const;

  const Batch& batch_;
  double inv_ = 0.0;              // 1 / N
  std::vector<int64_t> seg_end_;  // (segments) one past each segment's last row
  double loss_ = 0.0;
};

}  // namespace sbp
