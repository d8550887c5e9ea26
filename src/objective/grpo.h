#pragma once
// Group Relative Policy Optimization with the per-token loss and normalisers of TRL v0.23.0
// GRPOTrainer._compute_loss (importance_sampling_level "token", no delta, no entropy mask):
//
//   r_t  = exp(logp_t - old_t)      old_t: the sampling policy's log-prob, or logp_t detached
//   l_t  = -min(r_t A, clamp(r_t, 1 - eps_low, 1 + eps_high) A)  +  beta * KL3_t
//   KL3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1             (only if beta != 0)
//
//   loss_type  grpo:    mean over sequences of (sum_t m_t l_t / max(1, sum_t m_t)) / ga
//              bnpo:    sum_t m_t l_t / max(1, sum over the batch of m_t) / ga
//              dr_grpo: sum_t m_t l_t / (B * max_completion_length) / ga
//              dapo:    sum_t m_t l_t / (num_items_in_batch / num_processes)
//
// (B: sequences in this micro-batch, ga: TRL's current_gradient_accumulation_steps,
// num_items_in_batch: completion tokens of the whole generation batch over all processes.)
// Every normaliser is a constant of the batch, so l_t's weight w_t is known before the step
// and dL/dlogp_t = w_t dl_t/dlogp_t depends only on logp_t: GRPO streams with no pre-pass.
//
// Extension (not in TRL): entropy_coef adds -entropy_coef * H_t to l_t, H_t the entropy of
// the policy's next-token distribution at row t (an entropy bonus, as verl's entropy_coeff).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/enum_names.h"
#include "objective/objective.h"
#include "objective/sequence_rows.h"

namespace sbp {

enum class GrpoLoss { grpo, bnpo, dr_grpo, dapo };
inline constexpr EnumName<GrpoLoss> kGrpoLossNames[] = {{GrpoLoss::grpo, "grpo"},
                                                        {GrpoLoss::bnpo, "bnpo"},
                                                        {GrpoLoss::dr_grpo, "dr_grpo"},
                                                        {GrpoLoss::dapo, "dapo"}};
GrpoLoss parse_grpo_loss(const std::string& name);  // InputError naming the choices
const char* grpo_loss_name(GrpoLoss t);

struct GrpoConfig {
  double beta = 0.0;                    // KL coefficient; 0 skips the reference model entirely
  double epsilon_low = 0.2;             // TRL `epsilon`
  double epsilon_high = 0.0;            // TRL `epsilon_high` (DAPO recommends 0.28); 0: TRL's
                                        // None, = epsilon_low
  GrpoLoss loss_type = GrpoLoss::dapo;  // TRL v0.23.0's default
  int64_t max_completion_length = 0;    // dr_grpo's constant; <= 0: longest completion here
  int64_t grad_accum_steps = 1;         // ga above (grpo, bnpo, dr_grpo)
  double num_items_in_batch = 0.0;      // dapo; <= 0: this batch's completion tokens
  int64_t num_processes = 1;            // dapo
  double entropy_coef = 0.0;            // entropy bonus (extension, see above)
  bool log_entropy = true;              // compute entropies for the "entropy" metric
};

class GrpoObjective final : public Objective {
 public:
  // batch: one segment per completion (prompt + completion, loss mask on the completion).
  // advantages: (S) one per segment (group_advantages over the generation batch, sliced).
  // old_logp: (T) per-row log-probs of the sampling policy, or empty for "the current policy,
  //   detached" (ratio 1, gradient -A).
  // ref_logp: (T) the reference model's log-probs; required iff beta != 0.
  GrpoObjective(const Batch& batch, std::span<const float> advantages, const GrpoConfig& cfg,
                std::span<const float> old_logp = {}, std::span<const float> ref_logp = {});
  // The same with reference log-probs that may have stayed on the device (the backend reads
  // them there; the host's copy, for the KL statistic, comes with the step's wait).
  GrpoObjective(const Batch& batch, std::span<const float> advantages, const GrpoConfig& cfg,
                std::span<const float> old_logp, ReferenceLogp ref);

  // dL/dlogp_t = w_t (clipped surrogate' + beta k3'), on the backend (head_route.h
  // PolicyFormula).
  HeadRoute route() override;
  double loss() const override { return loss_; }
  std::vector<std::span<double>> pass_sums() override {
    return {{&loss_, 1}, {&kl_sum_, 1}, {&entropy_sum_, 1},
            {&low_, 1},  {&high_, 1},   {&mask_sum_, 1}};
  }
  // loss, kl (if beta != 0), entropy (if computed), clip_ratio/low_mean, clip_ratio/high_mean,
  // clip_ratio/region_mean: masked means over this batch's completion tokens, as TRL logs them.
  std::map<std::string, double> metrics() const override;

 private:
  bool wants_entropy() const { return cfg_.entropy_coef != 0.0 || cfg_.log_entropy; }
  // A block's (n, 4) constants (objective/policy_terms.h), and the pass's values for the loss.
  void policy_rows(int64_t row_begin, std::span<float> rows) const;
  void add_values(const TokenChunk& in);

  GrpoConfig cfg_;
  SequenceRows rows_;
  std::vector<float> adv_;  // (S)
  std::vector<float> old_;  // (T) or empty
  ReferenceLogp ref_;       // (T) or empty (beta 0)
  // (T) the loss_type's weight of each row, a float as the device holds it (and as TRL's
  // float32 tensors do), so that both backends and the loss use the same weights.
  std::vector<float> w_;
  PolicyTerms terms_;
  double loss_ = 0.0;
  double kl_sum_ = 0, entropy_sum_ = 0, low_ = 0, high_ = 0, mask_sum_ = 0;
};

}  // namespace sbp
