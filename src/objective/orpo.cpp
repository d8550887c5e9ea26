#include "objective/orpo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "objective/objective_setup.h"
#include "objective/token_terms.h"

namespace sbp {

OrpoLogOdds orpo_log_odds(double a_c, double a_r) {
  // log(1 - exp(a)) as log(-expm1(a)): exact near a = 0 (a probability near 1), where TRL's
  // log1p(-exp(a)) loses digits; the two agree to rounding elsewhere.
  OrpoLogOdds o;
  o.z = (a_c - a_r) - (std::log(-std::expm1(a_c)) - std::log(-std::expm1(a_r)));
  o.dz_dchosen = -1.0 / std::expm1(a_c);
  o.dz_drejected = 1.0 / std::expm1(a_r);
  return o;
}

double orpo_nll_rows(const Batch& batch) {
  double n = 0.0;
  for (size_t s = 0; s < batch.seq_lens.size(); s += 2)
    n += static_cast<double>(batch.seq_lens[s] - 1);
  return n;
}

OrpoObjective::OrpoObjective(const Batch& batch, const OrpoConfig& cfg, double pairs_in_step,
                             double nll_rows_in_step)
    : cfg_(cfg), rows_(batch) {
  const int64_t S = rows_.num_sequences();
  if (S % 2 != 0)
    throw InputError("orpo: the batch has " + std::to_string(S) +
                     " sequences; it needs (chosen, rejected) pairs");
  if (!(cfg.beta > 0.0)) throw InputError("orpo: beta must be > 0");
  for (int64_t s = 0; s < S; ++s) {
    if (!(rows_.weight_sum[static_cast<size_t>(s)] > 0.0))
      throw InputError("orpo: sequence " + std::to_string(s) + " has no completion token");
  }
  batch_nll_rows_ = orpo_nll_rows(batch);
  pairs_in_step_ = pairs_in_step > 0 ? pairs_in_step : static_cast<double>(S / 2);
  nll_rows_in_step_ = nll_rows_in_step > 0 ? nll_rows_in_step : batch_nll_rows_;
  policy_sum_.assign(static_cast<size_t>(S), 0.0);
  coef_.assign(static_cast<size_t>(S), 0.0);
  pairs_.resize(static_cast<size_t>(S / 2));
}

void OrpoObjective::prepass(int, const TokenChunk& in) {
  for (int64_t i = 0; i < in.size(); ++i) {
    const size_t t = static_cast<size_t>(in.row_begin + i);
    const int32_t s = rows_.segment[t];
    const double lp = in.logp[static_cast<size_t>(i)];
    policy_sum_[static_cast<size_t>(s)] += static_cast<double>(rows_.weight[t]) * lp;
    // A chosen sequence's rows with a target (all but its last; those carry logp 0 anyway).
    if (s % 2 == 0) nll_sum_ -= lp;
  }
}

void OrpoObjective::finish_prepass(int) {
  loss_ = nll_sum_ / nll_rows_in_step_;
  for (size_t p = 0; p < pairs_.size(); ++p) {
    const size_t c = 2 * p, r = 2 * p + 1;
    const double nc = rows_.weight_sum[c], nr = rows_.weight_sum[r];
    Pair& q = pairs_[p];
    q.chosen = policy_sum_[c] / nc;
    q.rejected = policy_sum_[r] / nr;
    const OrpoLogOdds o = orpo_log_odds(q.chosen, q.rejected);
    q.z = o.z;
    q.log_sigmoid_z = log_sigmoid(o.z);
    loss_ -= cfg_.beta * q.log_sigmoid_z / pairs_in_step_;
    // d(-beta log sigmoid(z))/dz = -beta sigmoid(-z); da/dlogp_t = m_t / n.
    const double d = -cfg_.beta / (1.0 + std::exp(o.z)) / pairs_in_step_;
    coef_[c] = d * o.dz_dchosen / nc;
    coef_[r] = d * o.dz_drejected / nr;
  }
  ready_ = true;
}

void OrpoObjective::constant_grads(int64_t row_begin, std::span<float> dlogp) {
  SBP_CHECK(ready_, "orpo: gradient pass before the pre-pass finished");
  rows_.scale_weights(coef_, row_begin, dlogp);
  // Plus the NLL's rows: a chosen sequence's, all but its last (which has no target).
  const double nll = -1.0 / nll_rows_in_step_;
  for (size_t i = 0; i < dlogp.size(); ++i) {
    const size_t t = static_cast<size_t>(row_begin) + i;
    const size_t s = static_cast<size_t>(rows_.segment[t]);
    if (s % 2 == 0 && static_cast<int64_t>(t) + 1 < rows_.begin[s + 1])
      dlogp[i] = static_cast<float>(coef_[s] * rows_.weight[t] + nll);
  }
}

std::map<std::string, double> OrpoObjective::metrics() const {
  double chosen = 0, rejected = 0, acc = 0, ratio = 0, z = 0;
  for (const Pair& q : pairs_) {
    chosen += q.chosen;
    rejected += q.rejected;
    // TRL: rewards = beta * a (detached); accuracy compares the rewards.
    acc += cfg_.beta * q.chosen > cfg_.beta * q.rejected ? 1.0 : 0.0;
    ratio += q.log_sigmoid_z;
    z += q.z;
  }
  const double n = static_cast<double>(std::max<size_t>(1, pairs_.size()));
  const double b = cfg_.beta;
  return {{"loss", loss_},
          {"nll_loss", batch_nll_rows_ > 0.0 ? nll_sum_ / batch_nll_rows_ : 0.0},
          {"rewards/chosen", b * chosen / n},
          {"rewards/rejected", b * rejected / n},
          {"rewards/accuracies", acc / n},
          {"rewards/margins", b * (chosen - rejected) / n},
          {"logps/chosen", chosen / n},
          {"logps/rejected", rejected / n},
          {"log_odds_ratio", ratio / n},
          {"log_odds_chosen", z / n}};
}

// ORPO trains on (chosen, rejected) pairs with the policy alone.
namespace {
constexpr const char* kOrpoFormats[] = {"preference"};
bool orpo_reference(const ObjectiveSetup&) { return false; }
std::string orpo_describe(const ObjectiveSetup& s) {
  char buf[100];
  std::snprintf(buf, sizeof buf, "orpo (beta %g)", s.orpo.beta);
  return buf;
}
const char* orpo_settings_error(const ObjectiveSetup& s) {
  return s.orpo.beta > 0.0 ? nullptr : "beta must be > 0";
}
constexpr ObjectiveSetting kOrpoSettings[] = {
    number_setting<&ObjectiveSetup::orpo, &OrpoConfig::beta>("orpo.beta", kPositive, true)};
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kOrpoTraits = {
    .kind = ObjectiveKind::orpo,
    .name = "orpo",
    .formats = kOrpoFormats,
    .formats_text = "preference (prompt, chosen, rejected)",
    .completions = true,
    .group = SequenceGroup::pair,
    .plan_sequences = 2,
    // token ids, loss mask, row segments and weights: DPO's tables less its reference log-probs
    .host_bytes_per_token = 16,
    .rollouts = false,
    .needs_reference = orpo_reference,
    .value_model = false,
    .analytic_memory = false,
    .describe = orpo_describe,
    .settings_error = orpo_settings_error,
    .settings = kOrpoSettings,
};

}  // namespace sbp
