#include "objective/orpo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "objective/objective_setup.h"
#include "objective/token_terms.h"

namespace sbp {

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
  terms_ = {.formula = SequenceFormula::orpo,
            .beta = cfg.beta,
            .units_in_step = pairs_in_step_,
            .nll_rows_in_step = nll_rows_in_step_};
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
    const UnitSums sums = {.policy = {policy_sum_[c], policy_sum_[r]},
                           .weight = {rows_.weight_sum[c], rows_.weight_sum[r]}};
    const UnitTerms u = sequence_unit(terms_, sums);
    Pair& q = pairs_[p];
    q.chosen = policy_sum_[c] / rows_.weight_sum[c];
    q.rejected = policy_sum_[r] / rows_.weight_sum[r];
    q.z = u.z;
    q.log_sigmoid_z = u.value;
    loss_ -= cfg_.beta * q.log_sigmoid_z / pairs_in_step_;
    coef_[c] = u.coef[0];
    coef_[r] = u.coef[1];
  }
  ready_ = true;
}

void OrpoObjective::constant_grads(int64_t row_begin, std::span<float> dlogp) {
  SBP_CHECK(ready_, "orpo: gradient pass before the pre-pass finished");
  SBP_CHECK(row_begin >= 0 && row_begin + static_cast<int64_t>(dlogp.size()) <= rows_.num_rows(),
            "orpo: rows outside the batch");
  for (size_t i = 0; i < dlogp.size(); ++i) {
    const size_t t = static_cast<size_t>(row_begin) + i;
    const size_t s = static_cast<size_t>(rows_.segment[t]);
    // The NLL's rows: a chosen sequence's, all but its last (which has no target).
    const bool nll = s % 2 == 0 && static_cast<int64_t>(t) + 1 < rows_.begin[s + 1];
    dlogp[i] = sequence_row_grad(terms_, coef_[s], rows_.weight[t], nll);
  }
}

HeadRoute OrpoObjective::route() {
  return SequenceRoute{
      .terms = terms_,
      .inputs = SequenceInputs{.weight = rows_.weight,
                               .begin = rows_.begin,
                               .label = {},
                               .reference = nullptr,
                               .kl_parts = Tensor()},
      .add_prepass = [this](const TokenChunk& rows) { prepass(0, rows); },
      .finish = [this] { finish_prepass(0); },
      .host_grads = [this](int64_t row_begin,
                           std::span<float> dlogp) { constant_grads(row_begin, dlogp); }};
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
