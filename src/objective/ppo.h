#pragma once
// PPO's two losses (TRL v0.23.0 PPOTrainer.train, its micro-batch loop), one per model, each
// driven through the streamed engine by its own objective:
//
//   policy (LM head):    pg_t = max(-A_t r_t, -A_t clamp(r_t, 1 - cliprange, 1 + cliprange))
//                        r_t = exp(logp_t - old_t)
//                        L_pi = masked_mean(pg) / ga              [- entropy_coef * masked_mean(H)
//                        / ga]
//   value (value head):  vc_t = clamp(v_t, vold_t - cliprange_value, vold_t + cliprange_value)
//                        L_v = vf_coef * 0.5 * masked_mean(max((v_t - R_t)^2, (vc_t - R_t)^2)) / ga
//
// TRL's `loss = pg_loss + vf_coef * vf_loss` is L_pi + L_v: the policy and the value model share
// no parameters (TRL's PolicyAndValueWrapper holds two models), so each model's gradient comes
// from its own term, and each model streams on its own. masked_mean runs over this micro-batch's
// completion rows, a constant; A_t, R_t, old_t and vold_t come from the rollout (gae.h), so
// dL/dlogp_t and dL/dv_t depend only on that row's logp_t or v_t.
//
// ga: gradient accumulation steps (Accelerate divides each micro-batch's loss by it).
// entropy_coef is an extension (TRL's PPOTrainer only logs the entropy).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/batch.h"
#include "objective/objective.h"
#include "objective/sequence_rows.h"

namespace sbp {

// One micro-batch's rollout constants for one of PPO's two objectives, per row (T): the
// advantages and the old log-probs (policy), or the returns and the old values (value model).
// `host` returns them; with `device` defined they were computed on the backend
// (objective_kernels.h's ppo_rollout_rows) and `host` may wait for the device's next read to bring
// them, so the objectives call it only where they need the numbers on the host: add_values() at the
// step's end, or policy_rows() / value_rows() when the engine cannot read `device`.
struct PpoRowConstants {
  std::shared_ptr<const std::vector<float>> first, second;  // (T) each
};
struct PpoRollout {
  std::function<PpoRowConstants()> host;
  Tensor device;  // (T, 4) policy rows or (T, 3) value rows, or undefined
  // Constants the host holds now (copied).
  static PpoRollout on_host(std::span<const float> first, std::span<const float> second);
};

struct PpoConfig {
  double cliprange = 0.2;  // TRL defaults
  double cliprange_value = 0.2;
  double vf_coef = 0.1;
  int64_t grad_accum_steps = 1;
  double entropy_coef = 0.0;
  bool log_entropy = true;
};

// The loss weight of each completion row of a micro-batch with n of them, as the objectives and
// the device hold it: the policy's 1 / (n ga), the value model's vf_coef 0.5 / (n ga).
float ppo_policy_weight(double n, const PpoConfig& cfg);
float ppo_value_weight(double n, const PpoConfig& cfg);

class PpoPolicyObjective final : public Objective {
 public:
  // advantages, old_logp: (T) per row (PpoAdvantages::advantages; the rollout's log-probs).
  PpoPolicyObjective(const Batch& batch, std::span<const float> advantages,
                     std::span<const float> old_logp, const PpoConfig& cfg);
  // rollout: advantages and old log-probs (PpoRollout::host), (T, 4) rows on the device or not.
  PpoPolicyObjective(const Batch& batch, PpoRollout rollout, const PpoConfig& cfg);

  // dL/dlogp_t = w clipped surrogate', on the backend (head_route.h PolicyFormula).
  HeadRoute route() override;
  double loss() const override { return loss_; }
  std::vector<std::span<double>> pass_sums() override {
    return {{&loss_, 1}, {&pg_sum_, 1}, {&clip_sum_, 1}, {&approxkl_sum_, 1}, {&entropy_sum_, 1}};
  }
  // loss, loss/policy (pg_loss before /ga), policy/clipfrac_avg, policy/approxkl_avg,
  // policy/entropy_avg (if computed).
  std::map<std::string, double> metrics() const override;

 private:
  const PpoRowConstants& constants() const;  // rollout_.host(), once
  bool wants_entropy() const { return cfg_.entropy_coef != 0.0 || cfg_.log_entropy; }
  // A block's (n, 4) constants (objective/policy_terms.h), and the pass's values for the loss.
  void policy_rows(int64_t row_begin, std::span<float> rows) const;
  void add_values(const TokenChunk& in);

  PpoConfig cfg_;
  SequenceRows rows_;
  PpoRollout rollout_;
  mutable PpoRowConstants host_;  // (T) advantages, old log-probs, once asked for
  double n_ = 0;                  // completion rows in this micro-batch
  float w_ = 0;                   // 1 / (n_ grad_accum_steps), as the device holds it
  PolicyTerms terms_;
  double loss_ = 0, pg_sum_ = 0, clip_sum_ = 0, approxkl_sum_ = 0, entropy_sum_ = 0;
};

class PpoValueObjective final : public Objective {
 public:
  // returns, old_values: (T) per row (PpoAdvantages::returns; the rollout's values).
  PpoValueObjective(const Batch& batch, std::span<const float> returns,
                    std::span<const float> old_values, const PpoConfig& cfg);
  // rollout: returns and old values (PpoRollout::host), (T, 3) rows on the device or not.
  PpoValueObjective(const Batch& batch, PpoRollout rollout, const PpoConfig& cfg);

  HeadKind head() const override { return HeadKind::value; }
  // dL/dv_t = w clipped value loss', on the backend (head_route.h ValueFormula).
  HeadRoute route() override;
  double loss() const override { return loss_; }
  std::vector<std::span<double>> pass_sums() override {
    return {{&loss_, 1}, {&vf_sum_, 1}, {&clip_sum_, 1}};
  }
  // loss (vf_coef included), loss/value (TRL's vf_loss), val/clipfrac_avg.
  std::map<std::string, double> metrics() const override;

 private:
  const PpoRowConstants& constants() const;  // rollout_.host(), once
  // A block's (n, 3) constants (objective/policy_terms.h), and the pass's values for the loss.
  void value_rows(int64_t row_begin, std::span<float> rows) const;
  void add_values(const TokenChunk& in);

  PpoConfig cfg_;
  SequenceRows rows_;
  PpoRollout rollout_;
  mutable PpoRowConstants host_;  // (T) returns, old values, once asked for
  double n_ = 0;
  float w_ = 0;  // vf_coef 0.5 / (n_ grad_accum_steps), as the device holds it
  ValueTerms terms_;
  double loss_ = 0, vf_sum_ = 0, clip_sum_ = 0;
};

}  // namespace sbp
