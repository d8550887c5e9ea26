#pragma once
// Odds Ratio Preference Optimization (Hong et al. 2024) with the semantics of TRL v0.23.0
// ORPOTrainer (odds_ratio_loss, concatenated_forward, get_batch_loss_metrics). No reference
// model:
//
//   a_c, a_r   = the MEAN over completion tokens of the policy's log-probs of chosen / rejected
//                (TRL's get_batch_logps with average_log_prob=True)
//   z          = (a_c - a_r) - (log(1 - exp(a_c)) - log(1 - exp(a_r)))   the log odds ratio
//   NLL        = -(sum of the log-probs of EVERY token of the chosen sequences, prompt included,
//                that has a previous token) / N     (TRL: "orpo chosen nll loss is computed over
//                the full prompt and response", a token mean over the batch)
//   L          = NLL - beta * sum over pairs log sigmoid(z) / pairs_in_step
//
// N and pairs_in_step are the WHOLE optimizer step's (all micro-batches, all ranks), so
// gradient accumulation equals one big batch (TRL averages per micro-batch: the same when the
// step is one micro-batch, which is what the parity fixtures check).
//
// The odds term is not a sum over tokens but its gradient is: with d = dL/dz,
//   dL/dlogp_t = m_t * d * (dz/da) / n   on the completion rows (n = completion tokens),
//   dz/da_c = 1 / (1 - exp(a_c)),  dz/da_r = -1 / (1 - exp(a_r)),
// plus -1/N on every scored row of a chosen sequence. So the engine streams it like DPO: one
// no-grad pre-pass sums each sequence's log-probs (and the chosen NLL), then the gradient pass.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "objective/objective.h"
#include "objective/sequence_rows.h"

namespace sbp {

struct OrpoConfig {
  double beta = 0.1;  // TRL ORPOConfig.beta (the paper's lambda)
};

// z of TRL's odds_ratio_loss: orpo_log_odds in objective/sequence_terms.h.

// The rows of a preference batch (preference_batch: chosen, rejected, ...) that ORPO's NLL
// scores: every row of a chosen sequence with a target in it (length - 1 per chosen sequence).
double orpo_nll_rows(const Batch& batch);

class OrpoObjective final : public Objective {
 public:
  // batch: segments in (chosen, rejected) order as preference_batch packs them.
  // pairs_in_step / nll_rows_in_step: the step's pairs and its orpo_nll_rows (all micro-batches,
  //   all ranks); <= 0: this batch's.
  // Throws InputError if the segment count is odd or a sequence has no completion token.
  OrpoObjective(const Batch& batch, const OrpoConfig& cfg, double pairs_in_step = 0,
                double nll_rows_in_step = 0);

  // One pre-pass, then dL/dlogp_t is a per-sequence constant times the row's weight, on the
  // device or, with a context group, on the host (head_route.h SequenceRoute).
  HeadRoute route() override;
  std::vector<std::span<double>> prepass_sums(int) override {
    return {policy_sum_, {&nll_sum_, 1}};
  }
  // The route's host halves, public for callers that run the formulas on the host (the
  // pre-pass on all rows at once, then finish_prepass): the pre-pass's per-sequence sums, the
  // loss and coefficients from them, then each row's dL/dlogp.
  void prepass(int pass, const TokenChunk& rows);
  void finish_prepass(int pass);
  void constant_grads(int64_t row_begin, std::span<float> dlogp);

  double loss() const override { return loss_; }
  // TRL's names: loss, nll_loss (this batch's token mean), rewards/chosen = beta * a_c,
  // rewards/rejected, rewards/accuracies, rewards/margins, logps/chosen = a_c, logps/rejected,
  // log_odds_ratio = mean log sigmoid(z), log_odds_chosen = mean z (means over this batch's
  // pairs). TRL's logits/chosen, logits/rejected (means of the raw [T, V] logits) are not
  // computed: the streamed head never holds them.
  std::map<std::string, double> metrics() const override;

  struct Pair {
    double chosen = 0, rejected = 0;  // a_c, a_r
    double z = 0, log_sigmoid_z = 0;
  };
  const std::vector<Pair>& pairs() const { return pairs_; }

 private:
  OrpoConfig cfg_;
  SequenceTerms terms_;
  SequenceRows rows_;
  double pairs_in_step_, nll_rows_in_step_;
  double batch_nll_rows_ = 0.0;     // this batch's chosen rows (nll_loss metric)
  std::vector<double> policy_sum_;  // (S) pre-pass: sum of m_t logp_t per sequence
  double nll_sum_ = 0.0;            // pre-pass: -sum of logp over the chosen rows
  std::vector<double> coef_;        // (S) odds term: dL/dlogp_t / m_t on each segment's rows
  std::vector<Pair> pairs_;
  bool ready_ = false;
  double loss_ = 0.0;
};

}  // namespace sbp
