#include "objective/grpo.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "core/error.h"
#include "objective/objective_setup.h"
#include "objective/token_terms.h"

namespace sbp {

GrpoLoss parse_grpo_loss(const std::string& name) {
  return parse_enum<GrpoLoss>(kGrpoLossNames, name, "GRPO loss type");
}

const char* grpo_loss_name(GrpoLoss t) { return enum_name<GrpoLoss>(kGrpoLossNames, t); }

GrpoObjective::GrpoObjective(const Batch& batch, std::span<const float> advantages,
                             const GrpoConfig& cfg, std::span<const float> old_logp,
                             std::span<const float> ref_logp)
    : GrpoObjective(batch, advantages, cfg, old_logp, ReferenceLogp::on_host(ref_logp)) {}

GrpoObjective::GrpoObjective(const Batch& batch, std::span<const float> advantages,
                             const GrpoConfig& cfg, std::span<const float> old_logp,
                             ReferenceLogp ref)
    : cfg_(cfg),
      rows_(batch),
      adv_(advantages.begin(), advantages.end()),
      old_(old_logp.begin(), old_logp.end()),
      ref_(std::move(ref)) {
  if (!ref_.host) ref_.host = std::make_shared<const std::vector<float>>();
  if (cfg_.epsilon_high == 0.0) cfg_.epsilon_high = cfg_.epsilon_low;
  const int64_t T = rows_.num_rows(), S = rows_.num_sequences();
  if (static_cast<int64_t>(adv_.size()) != S)
    throw InputError("grpo: " + std::to_string(adv_.size()) + " advantages for " +
                     std::to_string(S) + " sequences");
  if (!old_.empty() && static_cast<int64_t>(old_.size()) != T)
    throw InputError("grpo: " + std::to_string(old_.size()) + " old log-probs for " +
                     std::to_string(T) + " rows");
  if (cfg.beta != 0.0 && static_cast<int64_t>(ref_.host->size()) != T)
    throw InputError("grpo: beta != 0 needs the reference log-probs of all " + std::to_string(T) +
                     " rows (got " + std::to_string(ref_.host->size()) + ")");
  SBP_CHECK(!ref_.device.defined() || ref_.device.numel() == T,
            "grpo: the reference's device log-probs do not match the batch");
  if (cfg.grad_accum_steps < 1 || cfg.num_processes < 1)
    throw InputError("grpo: grad_accum_steps and num_processes must be >= 1");

  // The loss_type's normaliser, per row (constants of the batch).
  const double ga = static_cast<double>(cfg.grad_accum_steps);
  const double B = static_cast<double>(S);
  double max_len = static_cast<double>(cfg.max_completion_length);
  if (max_len <= 0)
    for (double n : rows_.weight_sum) max_len = std::max(max_len, n);
  const double items = cfg.num_items_in_batch > 0 ? cfg.num_items_in_batch : rows_.total_weight;
  w_.assign(static_cast<size_t>(T), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const size_t i = static_cast<size_t>(t);
    const double m = rows_.weight[i];
    if (m == 0.0) continue;
    switch (cfg.loss_type) {
      case GrpoLoss::grpo:
        w_[i] = static_cast<float>(
            m / (std::max(1.0, rows_.weight_sum[static_cast<size_t>(rows_.segment[i])]) * B * ga));
        break;
      case GrpoLoss::bnpo:
        w_[i] = static_cast<float>(m / (std::max(1.0, rows_.total_weight) * ga));
        break;
      case GrpoLoss::dr_grpo:
        w_[i] = static_cast<float>(m / (B * std::max(1.0, max_len) * ga));
        break;
      case GrpoLoss::dapo:
        w_[i] = static_cast<float>(m / (items / static_cast<double>(cfg.num_processes)));
        break;
    }
  }
  terms_.eps_low = cfg_.epsilon_low;
  terms_.eps_high = cfg_.epsilon_high;
  terms_.beta = cfg_.beta;
  terms_.entropy_coef = cfg_.entropy_coef;
  terms_.on_policy = old_.empty();
}

HeadRoute GrpoObjective::route() {
  return PolicyFormula{
      .terms = terms_,
      .entropy = wants_entropy(),
      .rows = [this](int64_t row_begin, std::span<float> rows) { policy_rows(row_begin, rows); },
      .rows_on_device = Tensor(),
      .reference = ref_.device.defined() ? &ref_ : nullptr,
      .add_values = [this](const TokenChunk& in) { add_values(in); }};
}

void GrpoObjective::policy_rows(int64_t row_begin, std::span<float> rows) const {
  const int64_t n = static_cast<int64_t>(rows.size()) / kPolicyRowWidth;
  SBP_CHECK(row_begin >= 0 && row_begin + n <= rows_.num_rows(), "grpo: rows outside the batch");
  for (int64_t k = 0; k < n; ++k) {
    const size_t t = static_cast<size_t>(row_begin + k);
    float* r = rows.data() + k * kPolicyRowWidth;
    r[kOldLogp] = old_.empty() ? 0.0f : old_[t];  // unused on policy (terms_.on_policy)
    // Unused without a KL term (beta 0), and where the backend reads the device's copy
    // (PolicyFormula::reference: the host's comes with a later wait). The host's route reads the
    // rows after a block's download, which brought it.
    r[kRefLogp] = ref_.host->empty() ? 0.0f : (*ref_.host)[t];
    r[kAdvantage] = adv_[static_cast<size_t>(rows_.segment[t])];
    r[kLossWeight] = w_[t];
  }
}

void GrpoObjective::add_values(const TokenChunk& in) {
  const bool ent = wants_entropy();
  for (int64_t k = 0; k < in.size(); ++k) {
    const size_t i = static_cast<size_t>(k), t = static_cast<size_t>(in.row_begin + k);
    const double m = rows_.weight[t];
    if (m == 0.0) continue;
    const double w = w_[t];
    const double lp = in.logp[i];
    const double old = old_.empty() ? lp : old_[t];
    const double A = adv_[static_cast<size_t>(rows_.segment[t])];
    double value = clipped_surrogate(lp, old, A, cfg_.epsilon_low, cfg_.epsilon_high).value;
    if (cfg_.beta != 0.0) {
      const double kl = kl_k3(lp, (*ref_.host)[t]).value;
      value += cfg_.beta * kl;
      kl_sum_ += m * kl;
    }
    if (ent) {
      const double H = in.entropy[i];
      value -= cfg_.entropy_coef * H;
      entropy_sum_ += m * H;
    }
    loss_ += w * value;
    low_ += clipped_low(lp, old, A, cfg_.epsilon_low) ? m : 0.0;
    high_ += clipped_high(lp, old, A, cfg_.epsilon_high) ? m : 0.0;
    mask_sum_ += m;
  }
}

std::map<std::string, double> GrpoObjective::metrics() const {
  const double n = std::max(1.0, mask_sum_);
  std::map<std::string, double> m = {{"loss", loss_},
                                     {"clip_ratio/low_mean", low_ / n},
                                     {"clip_ratio/high_mean", high_ / n},
                                     {"clip_ratio/region_mean", (low_ + high_) / n}};
  if (cfg_.beta != 0.0) m["kl"] = kl_sum_ / n;
  if (wants_entropy()) m["entropy"] = entropy_sum_ / n;
  return m;
}

// GRPO trains on groups of rollouts of one prompt; a reference model only with a KL term.
namespace {
constexpr const char* kGrpoFormats[] = {"rollout"};
bool grpo_reference(const ObjectiveSetup& s) { return s.grpo.beta != 0.0; }
std::string grpo_describe(const ObjectiveSetup& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "grpo (%s, beta %g, scale_rewards %s)",
                grpo_loss_name(s.grpo.loss_type), s.grpo.beta, scale_rewards_name(s.scale_rewards));
  return buf;
}
// --beta's default is 0.04, not grpo.beta's (TRL's) 0, so that a GRPO step that gradcheck,
// bench or plan runs includes its reference model.
constexpr ObjectiveSetting kGrpoSettings[] = {
    number_setting<&ObjectiveSetup::grpo, &GrpoConfig::beta>("grpo.beta", kNonNegative, true, 0.04),
    number_setting<&ObjectiveSetup::grpo, &GrpoConfig::epsilon_low>("grpo.epsilon", kPositive),
    number_setting<&ObjectiveSetup::grpo, &GrpoConfig::epsilon_high>("grpo.epsilon_high",
                                                                     kNonNegative),
    choice_setting<kGrpoLossNames, &ObjectiveSetup::grpo, &GrpoConfig::loss_type>("grpo.loss_type"),
    choice_setting<kScaleRewardsNames, &ObjectiveSetup::scale_rewards>("grpo.scale_rewards"),
    {.key = "grpo.reference", .type = SettingType::reference_dir}};
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kGrpoTraits = {
    .kind = ObjectiveKind::grpo,
    .name = "grpo",
    .formats = kGrpoFormats,
    .formats_text = "rollout (prompt, completion, reward)",
    .completions = true,
    .group = SequenceGroup::configured,
    .plan_sequences = 0,
    .host_bytes_per_token = 32,
    .rollouts = true,
    .needs_reference = grpo_reference,
    .value_model = false,
    .analytic_memory = false,
    .describe = grpo_describe,
    .settings_error = nullptr,
    .settings = kGrpoSettings,
};

}  // namespace sbp
