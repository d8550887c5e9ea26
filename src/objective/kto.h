#pragma once
// Kahneman-Tversky Optimization (Ethayarajh et al. 2024) with the semantics of TRL v0.23.0
// KTOTrainer (loss_type "kto": kto_loss, forward, _get_kl_dataset, get_batch_loss_metrics), on
// unpaired records {prompt, completion, label}, against a reference model:
//
//   S_i, R_i  = sum over completion tokens of the policy's / the reference's log-probs
//   KL        = max(0, mean over the KL pairs of (S'_j - R'_j)), detached: S', R' are the sums on
//               mismatched pairs (prompt j, completion j-1), see kto_kl_batch
//   desirable (label true):    l_i = w_d (1 - sigmoid(beta (S_i - R_i - KL)))
//   undesirable (label false): l_i = w_u (1 - sigmoid(beta (KL - (S_i - R_i))))
//   L         = sum_i l_i / sequences_in_step          (TRL: losses.nanmean())
//
// The loss is not a sum over tokens, but its gradient is: dL/dlogp_t = m_t dl_i/d(S_i) /
// sequences_in_step, so the engine streams it in two passes over the head (DESIGN §2): a no-grad
// pre-pass that sums the policy's log-probs per sequence, then the gradient pass. The KL term and
// the reference sums are constants of the step (real forwards of the policy, no grad, and of the
// reference model, computed by the step before any backward).
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "objective/objective.h"
#include "objective/sequence_rows.h"

namespace sbp {

struct KtoConfig {
  double beta = 0.1;
  double desirable_weight = 1.0;    // TRL KTOConfig.desirable_weight
  double undesirable_weight = 1.0;  // TRL KTOConfig.undesirable_weight
};

// TRL's KL dataset, within one micro-batch: sequence j of the result is the prompt of sequence j
// followed by the completion (with its loss mask) of sequence j-1, cyclically (the first takes
// the last's), as _get_kl_dataset shifts the completions of each batch by one. The prompt of a
// sequence is its tokens before its first loss-masked token. A batch of one sequence pairs it
// with itself (TRL's shift of a batch of one does the same). Same total tokens as `batch`.
Batch kto_kl_batch(const Batch& batch);

// The step's KL estimate as an objective is given it: known on the host (value), or still on
// the device: parts (2 P) F32 holding P doubles, each a micro-batch's part (objective_kernels.h's
// kto_kl_part), with the step's sequences, the estimate's denominator, and `host`, which gives the
// same value (objective/sequence_terms.h kto_kl_estimate of the same parts) once the KL forwards'
// log-probs have come back. The gradient pass then reads the estimate on the device (objective.h
// SequenceInputs::kl_parts) and the host learns it at the step's end, for the loss and `kl`.
struct KtoKl {
  double value = 0.0;
  Tensor parts;
  double sequences = 0.0;
  std::function<double()> host;
};

class KtoObjective final : public Objective {
 public:
  // labels: (S) 1 desirable, 0 undesirable. ref_logp: (T) the reference's log-probs on `batch`.
  // kl: the step's KL estimate (already clamped at 0). sequences_in_step: the step's sequences
  // (all micro-batches, all ranks); <= 0: this batch's.
  // Throws InputError on a label that is not 0 or 1, wrong sizes, or a sequence with no
  // completion token.
  KtoObjective(const Batch& batch, std::span<const float> ref_logp, std::span<const float> labels,
               double kl, const KtoConfig& cfg, double sequences_in_step = 0);
  // The same with reference log-probs that may still be on their way from the device (read
  // only in finish_prepass, after the pre-pass's values came back).
  KtoObjective(const Batch& batch, ReferenceLogp ref, std::span<const float> labels, double kl,
               const KtoConfig& cfg, double sequences_in_step = 0);
  // The same with the KL estimate that may still be on the device.
  KtoObjective(const Batch& batch, ReferenceLogp ref, std::span<const float> labels, KtoKl kl,
               const KtoConfig& cfg, double sequences_in_step = 0);

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
  // TRL's names: loss, kl, rewards/chosen, rewards/rejected (means of beta (S - R) over this
  // batch's desirable / undesirable sequences), logps/chosen, logps/rejected (means of S),
  // rewards/margins (chosen - rejected), count/chosen, count/rejected. A class absent from the
  // batch has no rewards/logps keys (TRL logs none either).
  std::map<std::string, double> metrics() const override;

 private:
  KtoConfig cfg_;
  SequenceTerms terms_;
  SequenceRows rows_;
  ReferenceLogp ref_;
  std::vector<float> labels_;    // (S) 1 desirable, 0 undesirable
  std::vector<bool> desirable_;  // (S)
  KtoKl kl_;
  double sequences_in_step_;
  std::vector<double> policy_sum_;  // (S) pre-pass
  std::vector<double> ref_sum_;     // (S) from ref_, in finish_prepass
  std::vector<double> coef_;        // (S) dL/dlogp_t / m_t
  bool ready_ = false;
  double loss_ = 0.0;
};

}  // namespace sbp
