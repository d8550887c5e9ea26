#include "objective/dpo.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "objective/objective_setup.h"

namespace sbp {

DpoLoss parse_dpo_loss(const std::string& name) {
  return parse_enum<DpoLoss>(kDpoLossNames, name, "DPO loss type");
}

const char* dpo_loss_name(DpoLoss t) { return enum_name<DpoLoss>(kDpoLossNames, t); }

Batch preference_batch(const std::vector<PreferencePair>& pairs) {
  std::vector<PromptCompletion> seqs;
  seqs.reserve(2 * pairs.size());
  for (const PreferencePair& p : pairs) {
    seqs.push_back({p.prompt, p.chosen});
    seqs.push_back({p.prompt, p.rejected});
  }
  return prompt_completion_batch(seqs);
}

DpoObjective::DpoObjective(const Batch& batch, std::span<const float> ref_logp,
                           const DpoConfig& cfg, double pairs_in_step)
    : DpoObjective(batch, ReferenceLogp::on_host(ref_logp), cfg, pairs_in_step) {}

DpoObjective::DpoObjective(const Batch& batch, ReferenceLogp ref, const DpoConfig& cfg,
                           double pairs_in_step)
    : cfg_(cfg), rows_(batch), ref_(std::move(ref)) {
  const int64_t S = rows_.num_sequences();
  if (S % 2 != 0)
    throw InputError("dpo: the batch has " + std::to_string(S) +
                     " sequences; it needs (chosen, rejected) pairs");
  SBP_CHECK(ref_.host, "dpo: no reference log-probs");
  if (static_cast<int64_t>(ref_.host->size()) != rows_.num_rows())
    throw InputError("dpo: " + std::to_string(ref_.host->size()) +
                     " reference log-probs for a batch of " + std::to_string(rows_.num_rows()));
  SBP_CHECK(!ref_.device.defined() || ref_.device.numel() == rows_.num_rows(),
            "dpo: the reference's device log-probs do not match the batch");
  if (!(cfg.beta > 0.0)) throw InputError("dpo: beta must be > 0");
  for (int64_t s = 0; s < S; ++s) {
    if (!(rows_.weight_sum[static_cast<size_t>(s)] > 0.0))
      throw InputError("dpo: sequence " + std::to_string(s) + " has no completion token");
  }
  pairs_in_step_ = pairs_in_step > 0 ? pairs_in_step : static_cast<double>(S / 2);
  terms_ = {.formula = SequenceFormula::dpo,
            .dpo_loss = cfg.loss_type,
            .beta = cfg.beta,
            .label_smoothing = cfg.label_smoothing,
            .units_in_step = pairs_in_step_};
  policy_sum_.assign(static_cast<size_t>(S), 0.0);
  ref_sum_.assign(static_cast<size_t>(S), 0.0);
  coef_.assign(static_cast<size_t>(S), 0.0);
  pairs_.resize(static_cast<size_t>(S / 2));
}

void DpoObjective::prepass(int, const TokenChunk& rows) {
  for (int64_t i = 0; i < rows.size(); ++i) {
    const size_t t = static_cast<size_t>(rows.row_begin + i);
    policy_sum_[static_cast<size_t>(rows_.segment[t])] +=
        static_cast<double>(rows_.weight[t]) * rows.logp[static_cast<size_t>(i)];
  }
}

void DpoObjective::finish_prepass(int) {
  // The reference's sums, in row order, now that its values are surely on the host.
  const std::vector<float>& ref = *ref_.host;
  ref_sum_.assign(ref_sum_.size(), 0.0);
  for (int64_t t = 0; t < rows_.num_rows(); ++t) {
    const size_t i = static_cast<size_t>(t);
    ref_sum_[static_cast<size_t>(rows_.segment[i])] +=
        static_cast<double>(rows_.weight[i]) * ref[i];
  }
  const bool ipo = cfg_.loss_type == DpoLoss::ipo;
  loss_ = 0.0;
  for (size_t p = 0; p < pairs_.size(); ++p) {
    const size_t c = 2 * p, r = 2 * p + 1;
    const UnitSums sums = {.policy = {policy_sum_[c], policy_sum_[r]},
                           .ref = {ref_sum_[c], ref_sum_[r]},
                           .weight = {rows_.weight_sum[c], rows_.weight_sum[r]}};
    const UnitTerms u = sequence_unit(terms_, sums);
    // ipo scores length-averaged log-probs (TRL: all_logps / loss_mask.sum(-1)).
    const double nc = ipo ? rows_.weight_sum[c] : 1.0, nr = ipo ? rows_.weight_sum[r] : 1.0;
    Pair& q = pairs_[p];
    q.policy_chosen = policy_sum_[c] / nc;
    q.policy_rejected = policy_sum_[r] / nr;
    q.ref_chosen = ref_sum_[c] / nc;
    q.ref_rejected = ref_sum_[r] / nr;
    q.z = u.z;
    q.loss = u.value;
    q.dloss_dz = u.dvalue_dz;
    loss_ += u.value / pairs_in_step_;
    coef_[c] = u.coef[0];
    coef_[r] = u.coef[1];
  }
  ready_ = true;
}

void DpoObjective::constant_grads(int64_t row_begin, std::span<float> dlogp) {
  SBP_CHECK(ready_, "dpo: gradient pass before the pre-pass finished");
  rows_.scale_weights(coef_, row_begin, dlogp);
}

HeadRoute DpoObjective::route() {
  return SequenceRoute{
      .terms = terms_,
      .inputs = SequenceInputs{.weight = rows_.weight,
                               .begin = rows_.begin,
                               .label = {},
                               .reference = &ref_,
                               .kl_parts = Tensor()},
      .add_prepass = [this](const TokenChunk& rows) { prepass(0, rows); },
      .finish = [this] { finish_prepass(0); },
      .host_grads = [this](int64_t row_begin,
                           std::span<float> dlogp) { constant_grads(row_begin, dlogp); }};
}

std::map<std::string, double> DpoObjective::metrics() const {
  double chosen = 0, rejected = 0, acc = 0, lc = 0, lr = 0;
  for (const Pair& q : pairs_) {
    // TRL: rewards = beta * (policy - reference), detached.
    const double rc = cfg_.beta * (q.policy_chosen - q.ref_chosen);
    const double rr = cfg_.beta * (q.policy_rejected - q.ref_rejected);
    chosen += rc;
    rejected += rr;
    acc += rc > rr ? 1.0 : 0.0;
    lc += q.policy_chosen;
    lr += q.policy_rejected;
  }
  const double n = static_cast<double>(std::max<size_t>(1, pairs_.size()));
  return {{"loss", loss_},
          {"rewards/chosen", chosen / n},
          {"rewards/rejected", rejected / n},
          {"rewards/accuracies", acc / n},
          {"rewards/margins", (chosen - rejected) / n},
          {"logps/chosen", lc / n},
          {"logps/rejected", lr / n}};
}

// DPO trains on (chosen, rejected) pairs and always scores against a reference model.
namespace {
constexpr const char* kDpoFormats[] = {"preference"};
bool dpo_reference(const ObjectiveSetup&) { return true; }
std::string dpo_describe(const ObjectiveSetup& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "dpo (%s, beta %g, label smoothing %g)",
                dpo_loss_name(s.dpo.loss_type), s.dpo.beta, s.dpo.label_smoothing);
  return buf;
}
const char* dpo_settings_error(const ObjectiveSetup& s) {
  return s.dpo.beta > 0.0 ? nullptr : "beta must be > 0";
}
constexpr ObjectiveSetting kDpoSettings[] = {
    number_setting<&ObjectiveSetup::dpo, &DpoConfig::beta>("dpo.beta", kPositive, true),
    choice_setting<kDpoLossNames, &ObjectiveSetup::dpo, &DpoConfig::loss_type>("dpo.loss_type"),
    number_setting<&ObjectiveSetup::dpo, &DpoConfig::label_smoothing>(
        "dpo.label_smoothing", {.lo = 0.0, .hi = 0.5, .hi_open = true}),
    {.key = "dpo.reference", .type = SettingType::reference_dir}};
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kDpoTraits = {
    .kind = ObjectiveKind::dpo,
    .name = "dpo",
    .formats = kDpoFormats,
    .formats_text = "preference (prompt, chosen, rejected)",
    .completions = true,
    .group = SequenceGroup::pair,
    .plan_sequences = 2,
    .host_bytes_per_token = 20,
    .rollouts = false,
    .needs_reference = dpo_reference,
    .value_model = false,
    .analytic_memory = false,
    .describe = dpo_describe,
    .settings_error = dpo_settings_error,
    .settings = kDpoSettings,
};

}  // namespace sbp
