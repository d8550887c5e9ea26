#include "objective/kto.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "objective/objective_setup.h"

namespace sbp {

Batch kto_kl_batch(const Batch& batch) {
  const size_t S = batch.seq_lens.size();
  auto mask = [&](size_t t) { return batch.loss_mask.empty() ? 1.0f : batch.loss_mask[t]; };
  // Each segment's [begin, prompt end, end).
  std::vector<size_t> begin(S), split(S), end(S);
  size_t row = 0;
  for (size_t s = 0; s < S; ++s) {
    begin[s] = row;
    end[s] = row + static_cast<size_t>(batch.seq_lens[s]);
    split[s] = begin[s];
    while (split[s] < end[s] && mask(split[s]) == 0.0f) ++split[s];
    row = end[s];
  }
  Batch kl;
  kl.tokens.reserve(batch.tokens.size());
  kl.loss_mask.reserve(batch.tokens.size());
  for (size_t j = 0; j < S; ++j) {
    const size_t c = (j + S - 1) % S;  // the completion of the sequence before
    for (size_t t = begin[j]; t < split[j]; ++t) {
      kl.tokens.push_back(batch.tokens[t]);
      kl.loss_mask.push_back(0.0f);
    }
    for (size_t t = split[c]; t < end[c]; ++t) {
      kl.tokens.push_back(batch.tokens[t]);
      kl.loss_mask.push_back(mask(t));
    }
    kl.seq_lens.push_back(static_cast<int64_t>((split[j] - begin[j]) + (end[c] - split[c])));
  }
  return kl;
}

KtoObjective::KtoObjective(const Batch& batch, std::span<const float> ref_logp,
                           std::span<const float> labels, double kl, const KtoConfig& cfg,
                           double sequences_in_step)
    : KtoObjective(batch, ReferenceLogp::on_host(ref_logp), labels, kl, cfg, sequences_in_step) {}

KtoObjective::KtoObjective(const Batch& batch, ReferenceLogp ref, std::span<const float> labels,
                           double kl, const KtoConfig& cfg, double sequences_in_step)
    : KtoObjective(batch, std::move(ref), labels,
                   KtoKl{.value = kl, .parts = Tensor(), .sequences = 0.0, .host = {}}, cfg,
                   sequences_in_step) {}

KtoObjective::KtoObjective(const Batch& batch, ReferenceLogp ref, std::span<const float> labels,
                           KtoKl kl, const KtoConfig& cfg, double sequences_in_step)
    : cfg_(cfg),
      rows_(batch),
      ref_(std::move(ref)),
      labels_(labels.begin(), labels.end()),
      kl_(std::move(kl)) {
  const int64_t S = rows_.num_sequences();
  if (static_cast<int64_t>(labels.size()) != S)
    throw InputError("kto: " + std::to_string(labels.size()) + " labels for " + std::to_string(S) +
                     " sequences");
  SBP_CHECK(ref_.host, "kto: no reference log-probs");
  if (static_cast<int64_t>(ref_.host->size()) != rows_.num_rows())
    throw InputError("kto: " + std::to_string(ref_.host->size()) +
                     " reference log-probs for a batch of " + std::to_string(rows_.num_rows()));
  SBP_CHECK(!ref_.device.defined() || ref_.device.numel() == rows_.num_rows(),
            "kto: the reference's device log-probs do not match the batch");
  if (!(cfg.beta > 0.0)) throw InputError("kto: beta must be > 0");
  if (!(cfg.desirable_weight >= 0.0) || !(cfg.undesirable_weight >= 0.0))
    throw InputError("kto: desirable_weight and undesirable_weight must be >= 0");
  if (kl_.parts.defined())
    SBP_CHECK(kl_.host && kl_.parts.dtype == DType::F32 && kl_.parts.numel() >= 2 &&
                  kl_.parts.numel() % 2 == 0,
              "kto: a KL estimate on the device needs its parts (2 P F32) and its host value");
  else if (!std::isfinite(kl_.value) || kl_.value < 0.0)
    throw InputError("kto: the KL estimate must be >= 0");
  for (int64_t s = 0; s < S; ++s) {
    const float l = labels[static_cast<size_t>(s)];
    if (l != 0.0f && l != 1.0f)
      throw InputError("kto: sequence " + std::to_string(s) + " has label " + std::to_string(l) +
                       "; labels are 1 (desirable) or 0 (undesirable)");
    desirable_.push_back(l == 1.0f);
    if (!(rows_.weight_sum[static_cast<size_t>(s)] > 0.0))
      throw InputError("kto: sequence " + std::to_string(s) + " has no completion token");
  }
  sequences_in_step_ = sequences_in_step > 0 ? sequences_in_step : static_cast<double>(S);
  terms_ = {.formula = SequenceFormula::kto,
            .beta = cfg.beta,
            .units_in_step = sequences_in_step_,
            .kl = kl_.value,
            .kl_sequences = kl_.sequences,
            .desirable_weight = cfg.desirable_weight,
            .undesirable_weight = cfg.undesirable_weight};
  policy_sum_.assign(static_cast<size_t>(S), 0.0);
  ref_sum_.assign(static_cast<size_t>(S), 0.0);
  coef_.assign(static_cast<size_t>(S), 0.0);
}

void KtoObjective::prepass(int, const TokenChunk& in) {
  for (int64_t i = 0; i < in.size(); ++i) {
    const size_t t = static_cast<size_t>(in.row_begin + i);
    policy_sum_[static_cast<size_t>(rows_.segment[t])] +=
        static_cast<double>(rows_.weight[t]) * in.logp[static_cast<size_t>(i)];
  }
}

void KtoObjective::finish_prepass(int) {
  // The KL estimate, where the gradient pass read it on the device: the same value here.
  if (kl_.host) {
    kl_.value = kl_.host();
    terms_.kl = kl_.value;
  }
  // The reference's sums, now that its values are surely on the host.
  ref_sum_.assign(policy_sum_.size(), 0.0);
  const std::vector<float>& ref = *ref_.host;
  for (int64_t t = 0; t < rows_.num_rows(); ++t) {
    const size_t u = static_cast<size_t>(t);
    ref_sum_[static_cast<size_t>(rows_.segment[u])] +=
        static_cast<double>(rows_.weight[u]) * ref[u];
  }
  loss_ = 0.0;
  for (size_t s = 0; s < policy_sum_.size(); ++s) {
    const UnitSums sums = {.policy = {policy_sum_[s], 0.0},
                           .ref = {ref_sum_[s], 0.0},
                           .weight = {rows_.weight_sum[s], 0.0},
                           .label = labels_[s]};
    const UnitTerms u = sequence_unit(terms_, sums);
    loss_ += u.value / sequences_in_step_;
    coef_[s] = u.coef[0];
  }
  ready_ = true;
}

void KtoObjective::constant_grads(int64_t row_begin, std::span<float> dlogp) {
  SBP_CHECK(ready_, "kto: gradient pass before the pre-pass finished");
  rows_.scale_weights(coef_, row_begin, dlogp);
}

HeadRoute KtoObjective::route() {
  return SequenceRoute{
      .terms = terms_,
      .inputs = SequenceInputs{.weight = rows_.weight,
                               .begin = rows_.begin,
                               .label = labels_,
                               .reference = &ref_,
                               .kl_parts = kl_.parts},
      .add_prepass = [this](const TokenChunk& rows) { prepass(0, rows); },
      .finish = [this] { finish_prepass(0); },
      .host_grads = [this](int64_t row_begin,
                           std::span<float> dlogp) { constant_grads(row_begin, dlogp); }};
}

std::map<std::string, double> KtoObjective::metrics() const {
  double n[2] = {0, 0}, reward[2] = {0, 0}, logps[2] = {0, 0};  // [undesirable, desirable]
  for (size_t s = 0; s < policy_sum_.size(); ++s) {
    const int k = desirable_[s] ? 1 : 0;
    n[k] += 1.0;
    reward[k] += cfg_.beta * (policy_sum_[s] - ref_sum_[s]);
    logps[k] += policy_sum_[s];
  }
  std::map<std::string, double> m = {
      {"loss", loss_}, {"kl", kl_.value}, {"count/chosen", n[1]}, {"count/rejected", n[0]}};
  if (n[1] > 0) {
    m["rewards/chosen"] = reward[1] / n[1];
    m["logps/chosen"] = logps[1] / n[1];
  }
  if (n[0] > 0) {
    m["rewards/rejected"] = reward[0] / n[0];
    m["logps/rejected"] = logps[0] / n[0];
  }
  if (n[0] > 0 && n[1] > 0) m["rewards/margins"] = m["rewards/chosen"] - m["rewards/rejected"];
  return m;
}

// KTO trains on unpaired (prompt, completion, label) records, each sequence alone, against a
// reference model.
namespace {
constexpr const char* kKtoFormats[] = {"unpaired_preference"};
bool kto_reference(const ObjectiveSetup&) { return true; }
std::string kto_describe(const ObjectiveSetup& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "kto (beta %g, desirable_weight %g, undesirable_weight %g)",
                s.kto.beta, s.kto.desirable_weight, s.kto.undesirable_weight);
  return buf;
}
const char* kto_settings_error(const ObjectiveSetup& s) {
  if (!(s.kto.beta > 0.0)) return "beta must be > 0";
  if (!(s.kto.desirable_weight >= 0.0) || !(s.kto.undesirable_weight >= 0.0))
    return "desirable and undesirable weights must be >= 0";
  return nullptr;
}
constexpr ObjectiveSetting kKtoSettings[] = {
    number_setting<&ObjectiveSetup::kto, &KtoConfig::beta>("kto.beta", kPositive, true),
    number_setting<&ObjectiveSetup::kto, &KtoConfig::desirable_weight>("kto.desirable_weight",
                                                                       kNonNegative),
    number_setting<&ObjectiveSetup::kto, &KtoConfig::undesirable_weight>("kto.undesirable_weight",
                                                                         kNonNegative),
    {.key = "kto.reference", .type = SettingType::reference_dir}};
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kKtoTraits = {
    .kind = ObjectiveKind::kto,
    .name = "kto",
    .formats = kKtoFormats,
    .formats_text = "unpaired_preference (prompt, completion, label)",
    .completions = true,
    .group = SequenceGroup::one,
    .plan_sequences = 2,
    // DPO's tables (ids, mask, segments, weights, reference log-probs) and the KL batch's ids
    // and mask
    .host_bytes_per_token = 28,
    .rollouts = false,
    .sequence_labels = true,
    .needs_reference = kto_reference,
    .value_model = false,
    .analytic_memory = false,
    .describe = kto_describe,
    .settings_error = kto_settings_error,
    .settings = kKtoSettings,
};

}  // namespace sbp
