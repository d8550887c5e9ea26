#pragma once
// Direct Preference Optimization (Rafailov et al. 2023) and its ipo / hinge variants, with the
// semantics of TRL v0.23.0 DPOTrainer (dpo_loss, concatenated_forward, get_batch_loss_metrics):
//
//   S_c, S_r   = sum over completion tokens of the policy's log-probs of chosen / rejected
//                (ipo: divided by the number of completion tokens, for policy and reference)
//   R_c, R_r   = the same for the reference model
//   z          = (S_c - S_r) - (R_c - R_r)                          TRL's `logits`
//   loss(pair) = sigmoid: -(1-ls) log s(beta z) - ls log s(-beta z)
//                hinge:   relu(1 - beta z)
//                ipo:     (z - 1/(2 beta))^2
//   L          = sum over pairs / pairs_in_step
//
// The loss is not a sum over tokens, but its gradient is: dL/dlogp_t = dloss/dz * (+-m_t) /
// pairs_in_step (ipo: / completion length), so the engine streams it in two passes over the
// head (DESIGN §2): a no-grad pre-pass that sums the policy's log-probs per sequence, then
// these per-sequence coefficients, then the gradient pass. The reference sums are constants
// from a real forward of the reference model (ReferenceModel), never from the policy.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/enum_names.h"
#include "objective/objective.h"
#include "objective/sequence_rows.h"
#include "objective/token_terms.h"

namespace sbp {

struct DpoConfig {
  double beta = 0.1;
  DpoLoss loss_type = DpoLoss::sigmoid;
  double label_smoothing = 0.0;  // sigmoid only (TRL ignores it, with a warning, otherwise)
};

inline constexpr EnumName<DpoLoss> kDpoLossNames[] = {
    {DpoLoss::sigmoid, "sigmoid"}, {DpoLoss::hinge, "hinge"}, {DpoLoss::ipo, "ipo"}};
DpoLoss parse_dpo_loss(const std::string& name);  // InputError naming the choices
const char* dpo_loss_name(DpoLoss t);

struct PreferencePair {
  std::vector<int32_t> prompt;
  std::vector<int32_t> chosen;    // completion, >= 1 token
  std::vector<int32_t> rejected;  // completion, >= 1 token
};

// Pair i becomes segments 2i = prompt + chosen and 2i + 1 = prompt + rejected, with loss masks
// on the completion tokens (the first completion token is scored, from the last prompt token).
Batch preference_batch(const std::vector<PreferencePair>& pairs);

class DpoObjective final : public Objective {
 public:
  // batch: segments in (chosen, rejected) order as preference_batch packs them.
  // ref_logp: (T) the reference model's target log-probs on this batch.
  // pairs_in_step: pairs in the whole optimizer step (all micro-batches, all ranks); the loss
  //   is the mean over them. <= 0: this batch's pairs.
  // Throws InputError if the segment count is odd or a sequence has no completion token.
  DpoObjective(const Batch& batch, std::span<const float> ref_logp, const DpoConfig& cfg,
               double pairs_in_step = 0);
  // The same with reference log-probs that may still be on their way from the device (read
  // only in finish_prepass, after the pre-pass's values came back).
  DpoObjective(const Batch& batch, ReferenceLogp ref, const DpoConfig& cfg,
               double pairs_in_step = 0);

  // One pre-pass, then dL/dlogp_t is a per-sequence constant times the row's weight, on the
  // device or, with a context group, on the host (head_route.h SequenceRoute).
  HeadRoute route() override;
  std::vector<std::span<double>> prepass_sums(int) override { return {policy_sum_}; }
  // The route's host halves, public for callers that run the formulas on the host (the
  // pre-pass on all rows at once, then finish_prepass): the pre-pass's per-sequence sums, the
  // loss and coefficients from them, then each row's dL/dlogp.
  void prepass(int pass, const TokenChunk& rows);
  void finish_prepass(int pass);
  void constant_grads(int64_t row_begin, std::span<float> dlogp);

  double loss() const override { return loss_; }
  // loss, rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
  // logps/chosen, logps/rejected (means over this batch's pairs, as TRL logs them).
  std::map<std::string, double> metrics() const override;

  struct Pair {
    double policy_chosen = 0, policy_rejected = 0;  // S_c, S_r
    double ref_chosen = 0, ref_rejected = 0;        // R_c, R_r
    double z = 0, loss = 0, dloss_dz = 0;
  };
  const std::vector<Pair>& pairs() const { return pairs_; }

 private:
  DpoConfig cfg_;
  SequenceTerms terms_;
  SequenceRows rows_;
  ReferenceLogp ref_;
  double pairs_in_step_;
  std::vector<double> policy_sum_;  // (S) pre-pass accumulators
  std::vector<double> ref_sum_;     // (S) from ref_, in finish_prepass
  std::vector<double> coef_;        // (S) dL/dlogp_t / m_t for the rows of each segment
  std::vector<Pair> pairs_;
  bool ready_ = false;
  double loss_ = 0.0;
};

}  // namespace sbp
