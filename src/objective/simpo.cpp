#include "objective/simpo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "objective/objective_setup.h"

namespace sbp {

double simpo_chosen_tokens(const Batch& batch) {
  const SequenceRows rows(batch);
  double n = 0.0;
  for (int64_t s = 0; s < rows.num_sequences(); s += 2) n += rows.weight_sum[static_cast<size_t>(s)];
  return n;
}

SimpoObjective::SimpoObjective(const Batch& batch, const SimpoConfig& cfg, double pairs_in_step,
                               double chosen_tokens_in_step)
    : cfg_(cfg), rows_(batch) {
  const int64_t S = rows_.num_sequences();
  if (S % 2 != 0)
    throw InputError("simpo: the batch has " + std::to_string(S) +
                     " sequences; it needs (chosen, rejected) pairs");
  if (!(cfg.beta > 0.0)) throw InputError("simpo: beta must be > 0");
  if (!(cfg.gamma >= 0.0 && std::isfinite(cfg.gamma)))
    throw InputError("simpo: gamma must be >= 0");
  if (!(cfg.label_smoothing >= 0.0 && cfg.label_smoothing < 0.5))
    throw InputError("simpo: label_smoothing must be in [0, 0.5)");
  if (!(cfg.cpo_alpha >= 0.0 && std::isfinite(cfg.cpo_alpha)))
    throw InputError("simpo: cpo_alpha must be >= 0");
  for (int64_t s = 0; s < S; ++s) {
    if (!(rows_.weight_sum[static_cast<size_t>(s)] > 0.0))
      throw InputError("simpo: sequence " + std::to_string(s) + " has no completion token");
  }
  for (int64_t s = 0; s < S; s += 2) batch_chosen_tokens_ += rows_.weight_sum[static_cast<size_t>(s)];
  terms_ = {.formula = SequenceFormula::simpo,
            .beta = cfg.beta,
            .label_smoothing = cfg.label_smoothing,
            .units_in_step = pairs_in_step > 0 ? pairs_in_step : static_cast<double>(S / 2),
            .nll_rows_in_step =
                chosen_tokens_in_step > 0 ? chosen_tokens_in_step : batch_chosen_tokens_,
            .gamma = cfg.gamma,
            .cpo_alpha = cfg.cpo_alpha};
  policy_sum_.assign(static_cast<size_t>(S), 0.0);
  coef_.assign(static_cast<size_t>(S), 0.0);
  pairs_.resize(static_cast<size_t>(S / 2));
}

void SimpoObjective::add_prepass(const TokenChunk& in) {
  for (int64_t i = 0; i < in.size(); ++i) {
    const size_t t = static_cast<size_t>(in.row_begin + i);
    policy_sum_[static_cast<size_t>(rows_.segment[t])] +=
        static_cast<double>(rows_.weight[t]) * in.logp[static_cast<size_t>(i)];
  }
}

void SimpoObjective::finish_prepass() {
  loss_ = 0.0;
  for (size_t p = 0; p < pairs_.size(); ++p) {
    const size_t c = 2 * p, r = 2 * p + 1;
    const UnitSums sums = {.policy = {policy_sum_[c], policy_sum_[r]},
                           .weight = {rows_.weight_sum[c], rows_.weight_sum[r]}};
    const UnitTerms u = sequence_unit(terms_, sums);
    Pair& q = pairs_[p];
    q.chosen = policy_sum_[c] / rows_.weight_sum[c];
    q.rejected = policy_sum_[r] / rows_.weight_sum[r];
    q.z = u.z;
    q.loss = u.value;
    loss_ += u.value / terms_.units_in_step - cfg_.cpo_alpha * policy_sum_[c] / terms_.nll_rows_in_step;
    coef_[c] = u.coef[0];
    coef_[r] = u.coef[1];
  }
  ready_ = true;
}

void SimpoObjective::constant_grads(int64_t row_begin, std::span<float> dlogp) const {
  SBP_CHECK(ready_, "simpo: gradient pass before the pre-pass finished");
  for (size_t i = 0; i < dlogp.size(); ++i) {
    const size_t t = static_cast<size_t>(row_begin) + i;
    SBP_CHECK(t < rows_.weight.size(), "simpo: rows outside the batch");
    dlogp[i] = sequence_row_grad(terms_, coef_[static_cast<size_t>(rows_.segment[t])],
                                 rows_.weight[t], false);
  }
}

HeadRoute SimpoObjective::route() {
  return SequenceRoute{
      .terms = terms_,
      .inputs = SequenceInputs{.weight = rows_.weight, .begin = rows_.begin},
      .add_prepass = [this](const TokenChunk& rows) { add_prepass(rows); },
      .finish = [this] { finish_prepass(); },
      .host_grads = [this](int64_t row_begin,
                           std::span<float> dlogp) { constant_grads(row_begin, dlogp); }};
}

std::map<std::string, double> SimpoObjective::metrics() const {
  double chosen = 0, rejected = 0, acc = 0;
  for (const Pair& q : pairs_) {
    chosen += q.chosen;
    rejected += q.rejected;
    // TRL: rewards = beta * a (detached); accuracy compares the rewards.
    acc += cfg_.beta * q.chosen > cfg_.beta * q.rejected ? 1.0 : 0.0;
  }
  double nll = 0.0;  // TRL logs 0 when cpo_alpha is 0 (it does not compute the NLL then)
  if (cfg_.cpo_alpha != 0.0) {
    for (size_t p = 0; p < pairs_.size(); ++p) nll -= policy_sum_[2 * p];
    nll /= batch_chosen_tokens_;
  }
  const double n = static_cast<double>(std::max<size_t>(1, pairs_.size()));
  const double b = cfg_.beta;
  return {{"loss", loss_},
          {"nll_loss", nll},
          {"rewards/chosen", b * chosen / n},
          {"rewards/rejected", b * rejected / n},
          {"rewards/accuracies", acc / n},
          {"rewards/margins", b * (chosen - rejected) / n},
          {"logps/chosen", chosen / n},
          {"logps/rejected", rejected / n}};
}

// SimPO trains on (chosen, rejected) pairs with the policy alone.
namespace {
constexpr const char* kSimpoFormats[] = {"preference"};
bool simpo_reference(const ObjectiveSetup&) { return false; }
std::string simpo_describe(const ObjectiveSetup& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "simpo (beta %g, gamma %g, label smoothing %g, cpo_alpha %g)",
                s.simpo.beta, s.simpo.gamma, s.simpo.label_smoothing, s.simpo.cpo_alpha);
  return buf;
}
const char* simpo_settings_error(const ObjectiveSetup& s) {
  return s.simpo.beta > 0.0 ? nullptr : "beta must be > 0";
}
constexpr ObjectiveSetting kSimpoSettings[] = {
    number_setting<&ObjectiveSetup::simpo, &SimpoConfig::beta>("simpo.beta", kPositive, true),
    number_setting<&ObjectiveSetup::simpo, &SimpoConfig::gamma>("simpo.gamma", kNonNegative),
    number_setting<&ObjectiveSetup::simpo, &SimpoConfig::label_smoothing>(
        "simpo.label_smoothing", {.lo = 0.0, .hi = 0.5, .hi_open = true}),
    number_setting<&ObjectiveSetup::simpo, &SimpoConfig::cpo_alpha>("simpo.cpo_alpha",
                                                                    kNonNegative)};
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kSimpoTraits = {
    .kind = ObjectiveKind::simpo,
    .name = "simpo",
    .formats = kSimpoFormats,
    .formats_text = "preference (prompt, chosen, rejected)",
    .completions = true,
    .group = SequenceGroup::pair,
    .plan_sequences = 2,
    // ORPO's tables: token ids, loss mask, row segments and weights
    .host_bytes_per_token = 16,
    .rollouts = false,
    .needs_reference = simpo_reference,
    .value_model = false,
    .analytic_memory = false,
    .describe = simpo_describe,
    .settings_error = simpo_settings_error,
    .settings = kSimpoSettings,
};

}  // namespace sbp
