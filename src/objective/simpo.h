#pragma once
// Simple Preference Optimization (Meng et al. 2024) with the semantics of TRL's CPOTrainer
// with loss_type "simpo" (TRL 1.x, trl.experimental.cpo: concatenated_forward, cpo_loss,
// get_batch_loss_metrics). No reference model:
//
//   a_c, a_r   = the MEAN over completion tokens of the policy's log-probs of chosen / rejected
//                (get_batch_logps with average_log_prob=True: sum m_t logp_t / sum m_t)
//   z          = (a_c - a_r) - gamma / beta                      TRL's `logits`
//   l(z)       = -(1 - ls) log sigmoid(beta z) - ls log sigmoid(-beta z)
//   NLL        = -(sum of m_t logp_t over the chosen sequences) / N   (only with cpo_alpha != 0:
//                CrossEntropyLoss over the chosen labels, which are -100 on the prompt)
//   L          = sum over pairs l(z) / pairs_in_step + cpo_alpha * NLL
//
// cpo_alpha = 0 is SimPO proper (TRL's docs: loss_type="simpo", cpo_alpha=0); cpo_alpha > 0 is
// CPO-SimPO. pairs_in_step and N (the chosen completion tokens) are the WHOLE optimizer step's
// (all micro-batches, all ranks), so gradient accumulation equals one big batch (TRL averages
// per micro-batch: the same when the step is one micro-batch, which the parity fixtures check).
//
// The loss is a function of per-sequence sums, so, with d = dl/dz,
//   dL/dlogp_t = m_t d / (pairs_in_step n_c) - m_t cpo_alpha / N   on chosen rows,
//   dL/dlogp_t = -m_t d / (pairs_in_step n_r)                      on rejected rows,
// objective/sequence_terms.h's SequenceFormula::simpo, which the device computes too: one no-grad
// pre-pass sums each sequence's log-probs, then the gradient pass (head_route.h SequenceRoute).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "objective/objective.h"
#include "objective/sequence_rows.h"

namespace sbp {

struct SimpoConfig {
  double beta = 0.1;             // TRL CPOConfig.beta
  double gamma = 0.5;            // CPOConfig.simpo_gamma: the target reward margin, >= 0
  double label_smoothing = 0.0;  // CPOConfig.label_smoothing
  double cpo_alpha = 0.0;        // CPOConfig.cpo_alpha (its default is 1.0, CPO's; 0 is SimPO)
};

// The chosen completion tokens of a preference batch (chosen, rejected, ...): the sum of m_t
// over its chosen sequences, the NLL's denominator.
double simpo_chosen_tokens(const Batch& batch);

class SimpoObjective final : public Objective {
 public:
  // batch: segments in (chosen, rejected) order as preference_batch packs them.
  // pairs_in_step / chosen_tokens_in_step: the step's pairs and simpo_chosen_tokens (all
  //   micro-batches, all ranks); <= 0: this batch's.
  // Throws InputError if the segment count is odd, a sequence has no completion token or a
  // setting is out of its range.
  SimpoObjective(const Batch& batch, const SimpoConfig& cfg, double pairs_in_step = 0,
                 double chosen_tokens_in_step = 0);

  // One pre-pass, then dL/dlogp_t is a per-sequence constant times the row's weight.
  HeadRoute route() override;
  std::vector<std::span<double>> prepass_sums(int) override { return {policy_sum_}; }

  double loss() const override { return loss_; }
  // TRL's names: loss, nll_loss (this batch's chosen NLL; 0 without cpo_alpha, as TRL logs it),
  // rewards/chosen = beta * a_c, rewards/rejected, rewards/accuracies, rewards/margins,
  // logps/chosen = a_c, logps/rejected (means over this batch's pairs). TRL's logits/chosen and
  // logits/rejected (means of the raw [T, V] logits) are not computed: the streamed head never
  // holds them.
  std::map<std::string, double> metrics() const override;

  struct Pair {
    double chosen = 0, rejected = 0;  // a_c, a_r
    double z = 0, loss = 0;           // TRL's logits and l(z)
  };
  const std::vector<Pair>& pairs() const { return pairs_; }

 private:
  void add_prepass(const TokenChunk& rows);
  void finish_prepass();
  void constant_grads(int64_t row_begin, std::span<float> dlogp) const;

  SimpoConfig cfg_;
  SequenceTerms terms_;
  SequenceRows rows_;
  double batch_chosen_tokens_ = 0.0;
  std::vector<double> policy_sum_;  // (S) pre-pass: sum of m_t logp_t per sequence
  std::vector<double> coef_;        // (S) dL/dlogp_t / m_t on each segment's rows
  std::vector<Pair> pairs_;
  bool ready_ = false;
  double loss_ = 0.0;
};

}  // namespace sbp
