#include "objective/ppo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "core/error.h"
#include "objective/objective_setup.h"
#include "objective/token_terms.h"

namespace sbp {

namespace {
void check_rows(const char* what, std::span<const float> v, int64_t T) {
  if (static_cast<int64_t>(v.size()) != T)
    throw InputError(std::string("ppo: ") + what + " has " + std::to_string(v.size()) +
                     " entries for " + std::to_string(T) + " rows");
}
double completion_rows(const SequenceRows& rows) {
  double n = 0;
  for (float m : rows.weight) n += m > 0.0f ? 1.0 : 0.0;
  if (n == 0) throw InputError("ppo: the batch has no completion token");
  return n;
}
// The rollout's host constants, asked for once and checked against the batch's T rows.
const PpoRowConstants& host_constants(const PpoRollout& r, PpoRowConstants& cache, int64_t T,
                                      const char* first, const char* second) {
  if (!cache.first) {
    PpoRowConstants c = r.host();
    check_rows(first, *c.first, T);
    check_rows(second, *c.second, T);
    cache = std::move(c);
  }
  return cache;
}

// Rows on the device must be the batch's (T, width); constants on the host are checked at once.
void check_rollout(const PpoRollout& r, int64_t T, int width, const std::function<void()>& host) {
  if (!r.device.defined()) return host();
  SBP_CHECK(r.device.rows() == T && r.device.cols() == width,
            "ppo: the rollout's device rows must be (T, " + std::to_string(width) + ")");
}

}  // namespace

float ppo_policy_weight(double n, const PpoConfig& cfg) {
  return static_cast<float>(1.0 / (n * static_cast<double>(cfg.grad_accum_steps)));
}
float ppo_value_weight(double n, const PpoConfig& cfg) {
  return static_cast<float>(cfg.vf_coef * 0.5 / (n * static_cast<double>(cfg.grad_accum_steps)));
}

PpoRollout PpoRollout::on_host(std::span<const float> first, std::span<const float> second) {
  const PpoRowConstants c{std::make_shared<const std::vector<float>>(first.begin(), first.end()),
                          std::make_shared<const std::vector<float>>(second.begin(), second.end())};
  return {.host = [c] { return c; }, .device = Tensor()};
}

PpoPolicyObjective::PpoPolicyObjective(const Batch& batch, std::span<const float> advantages,
                                       std::span<const float> old_logp, const PpoConfig& cfg)
    : PpoPolicyObjective(batch, PpoRollout::on_host(advantages, old_logp), cfg) {}

PpoPolicyObjective::PpoPolicyObjective(const Batch& batch, PpoRollout rollout, const PpoConfig& cfg)
    : cfg_(cfg), rows_(batch), rollout_(std::move(rollout)) {
  check_rollout(rollout_, rows_.num_rows(), kPolicyRowWidth, [this] { constants(); });
  if (cfg.grad_accum_steps < 1) throw InputError("ppo: grad_accum_steps must be >= 1");
  n_ = completion_rows(rows_);
  w_ = ppo_policy_weight(n_, cfg_);
  terms_.eps_low = terms_.eps_high = cfg_.cliprange;
  terms_.entropy_coef = cfg_.entropy_coef;
}

const PpoRowConstants& PpoPolicyObjective::constants() const {
  return host_constants(rollout_, host_, rows_.num_rows(), "advantages", "old_logp");
}

HeadRoute PpoPolicyObjective::route() {
  return PolicyFormula{
      .terms = terms_,
      .entropy = wants_entropy(),
      .rows = [this](int64_t row_begin, std::span<float> rows) { policy_rows(row_begin, rows); },
      .rows_on_device = rollout_.device,
      .reference = nullptr,
      .add_values = [this](const TokenChunk& in) { add_values(in); }};
}

void PpoPolicyObjective::policy_rows(int64_t row_begin, std::span<float> rows) const {
  const int64_t n = static_cast<int64_t>(rows.size()) / kPolicyRowWidth;
  SBP_CHECK(row_begin >= 0 && row_begin + n <= rows_.num_rows(), "ppo: rows outside the batch");
  const std::vector<float>& adv = *constants().first;
  const std::vector<float>& old = *constants().second;
  for (int64_t k = 0; k < n; ++k) {
    const size_t t = static_cast<size_t>(row_begin + k);
    float* r = rows.data() + k * kPolicyRowWidth;
    r[kOldLogp] = old[t];
    r[kRefLogp] = 0.0f;  // PPO's KL is in its rewards, not in this loss
    r[kAdvantage] = adv[t];
    r[kLossWeight] = rows_.weight[t] > 0.0f ? w_ : 0.0f;
  }
}

void PpoPolicyObjective::add_values(const TokenChunk& in) {
  const bool ent = wants_entropy();
  const double w = w_;
  const std::vector<float>& adv = *constants().first;
  const std::vector<float>& old_logp = *constants().second;
  for (int64_t k = 0; k < in.size(); ++k) {
    const size_t i = static_cast<size_t>(k), t = static_cast<size_t>(in.row_begin + k);
    if (!(rows_.weight[t] > 0.0f)) continue;
    const double lp = in.logp[i], old = old_logp[t], A = adv[t];
    // max(-A r, -A clip(r)) = -min(A r, A clip(r)): the GRPO surrogate with symmetric eps.
    const Term pg = clipped_surrogate(lp, old, A, cfg_.cliprange, cfg_.cliprange);
    double value = pg.value;
    if (ent) {
      const double H = in.entropy[i];
      value -= cfg_.entropy_coef * H;
      entropy_sum_ += H;
    }
    loss_ += w * value;
    pg_sum_ += pg.value;
    // TRL's pg_clipfrac: the clipped branch strictly larger (pg_losses2 > pg_losses).
    const double r = std::exp(lp - old);
    const double clipped = -A * std::clamp(r, 1.0 - cfg_.cliprange, 1.0 + cfg_.cliprange);
    clip_sum_ += clipped > -A * r ? 1.0 : 0.0;
    approxkl_sum_ += 0.5 * (lp - old) * (lp - old);
  }
}

std::map<std::string, double> PpoPolicyObjective::metrics() const {
  std::map<std::string, double> m = {{"loss", loss_},
                                     {"loss/policy", pg_sum_ / n_},
                                     {"policy/clipfrac_avg", clip_sum_ / n_},
                                     {"policy/approxkl_avg", approxkl_sum_ / n_}};
  if (wants_entropy()) m["policy/entropy_avg"] = entropy_sum_ / n_;
  return m;
}

PpoValueObjective::PpoValueObjective(const Batch& batch, std::span<const float> returns,
                                     std::span<const float> old_values, const PpoConfig& cfg)
    : PpoValueObjective(batch, PpoRollout::on_host(returns, old_values), cfg) {}

PpoValueObjective::PpoValueObjective(const Batch& batch, PpoRollout rollout, const PpoConfig& cfg)
    : cfg_(cfg), rows_(batch), rollout_(std::move(rollout)) {
  check_rollout(rollout_, rows_.num_rows(), kValueRowWidth, [this] { constants(); });
  if (cfg.grad_accum_steps < 1) throw InputError("ppo: grad_accum_steps must be >= 1");
  n_ = completion_rows(rows_);
  w_ = ppo_value_weight(n_, cfg_);
  terms_.clip = cfg_.cliprange_value;
}

const PpoRowConstants& PpoValueObjective::constants() const {
  return host_constants(rollout_, host_, rows_.num_rows(), "returns", "old_values");
}

HeadRoute PpoValueObjective::route() {
  return ValueFormula{
      .terms = terms_,
      .rows = [this](int64_t row_begin, std::span<float> rows) { value_rows(row_begin, rows); },
      .rows_on_device = rollout_.device,
      .add_values = [this](const TokenChunk& in) { add_values(in); }};
}

void PpoValueObjective::value_rows(int64_t row_begin, std::span<float> rows) const {
  const int64_t n = static_cast<int64_t>(rows.size()) / kValueRowWidth;
  SBP_CHECK(row_begin >= 0 && row_begin + n <= rows_.num_rows(), "ppo: rows outside the batch");
  const std::vector<float>& ret = *constants().first;
  const std::vector<float>& vold = *constants().second;
  for (int64_t k = 0; k < n; ++k) {
    const size_t t = static_cast<size_t>(row_begin + k);
    float* r = rows.data() + k * kValueRowWidth;
    r[kOldValue] = vold[t];
    r[kReturn] = ret[t];
    r[kValueWeight] = rows_.weight[t] > 0.0f ? w_ : 0.0f;
  }
}

void PpoValueObjective::add_values(const TokenChunk& in) {
  const double w = w_;
  const std::vector<float>& ret = *constants().first;
  const std::vector<float>& vold = *constants().second;
  for (int64_t k = 0; k < in.size(); ++k) {
    const size_t i = static_cast<size_t>(k), t = static_cast<size_t>(in.row_begin + k);
    if (!(rows_.weight[t] > 0.0f)) continue;
    const double v = in.value[i];
    const Term vf = clipped_value_loss(v, vold[t], ret[t], cfg_.cliprange_value);
    loss_ += w * vf.value;
    vf_sum_ += vf.value;
    const double vc = std::clamp(v, vold[t] - cfg_.cliprange_value, vold[t] + cfg_.cliprange_value);
    clip_sum_ += (vc - ret[t]) * (vc - ret[t]) > (v - ret[t]) * (v - ret[t]) ? 1.0 : 0.0;
  }
}

std::map<std::string, double> PpoValueObjective::metrics() const {
  return {
      {"loss", loss_}, {"loss/value", 0.5 * vf_sum_ / n_}, {"val/clipfrac_avg", clip_sum_ / n_}};
}

// PPO trains on rollouts with a value model beside the policy; its KL penalty is part of the
// per-token rewards and objective/kl is logged even when kl_coef is 0, so it always scores
// against a reference model. Plan and bench shape two sequences, so that the advantages are
// whitened over more than one.
namespace {
constexpr const char* kPpoFormats[] = {"rollout"};
bool ppo_reference(const ObjectiveSetup&) { return true; }
std::string ppo_describe(const ObjectiveSetup& s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "ppo (kl_coef %g, vf_coef %g)", s.rollout.kl_coef, s.ppo.vf_coef);
  return buf;
}
// ppo.beta is the KL penalty's kl_coef; ppo.epsilon and ppo.value_epsilon are TRL's cliprange
// and cliprange_value.
constexpr ObjectiveSetting kPpoSettings[] = {
    number_setting<&ObjectiveSetup::rollout, &PpoRolloutConfig::kl_coef>("ppo.beta", kNonNegative,
                                                                         true),
    number_setting<&ObjectiveSetup::ppo, &PpoConfig::cliprange>("ppo.epsilon", kPositive),
    number_setting<&ObjectiveSetup::ppo, &PpoConfig::cliprange_value>("ppo.value_epsilon",
                                                                      kPositive),
    number_setting<&ObjectiveSetup::ppo, &PpoConfig::vf_coef>("ppo.vf_coef", kNonNegative),
    number_setting<&ObjectiveSetup::rollout, &PpoRolloutConfig::gamma>("ppo.gamma", kUnitInterval),
    number_setting<&ObjectiveSetup::rollout, &PpoRolloutConfig::lam>("ppo.lam", kUnitInterval),
    choice_setting<kKlEstimatorNames, &ObjectiveSetup::rollout, &PpoRolloutConfig::kl_estimator>(
        "ppo.kl_estimator"),
    {.key = "ppo.reference", .type = SettingType::reference_dir},
    {.key = "ppo.value_model", .type = SettingType::value_model_dir}};
}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_traits.cpp registers it.
extern const ObjectiveTraits kPpoTraits = {
    .kind = ObjectiveKind::ppo,
    .name = "ppo",
    .formats = kPpoFormats,
    .formats_text = "rollout (prompt, completion, reward)",
    .completions = true,
    .group = SequenceGroup::one,
    .plan_sequences = 2,
    .host_bytes_per_token = 64,
    .rollouts = true,
    .needs_reference = ppo_reference,
    .value_model = true,
    .analytic_memory = false,
    .describe = ppo_describe,
    .settings_error = nullptr,
    .settings = kPpoSettings,
};

}  // namespace sbp
