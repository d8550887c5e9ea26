#include "objective/gae.h"

#include <cmath>

#include "core/error.h"
#include "objective/sequence_rows.h"
#include "objective/token_terms.h"

namespace sbp {

KlEstimator parse_kl_estimator(const std::string& name) {
  if (name == "k1") return KlEstimator::k1;
  if (name == "k3") return KlEstimator::k3;
  throw InputError("unknown kl_estimator '" + name + "' (use k1 or k3)");
}

std::vector<double> masked_whiten(std::span<const double> x, const std::vector<bool>& mask,
                                  bool shift_mean) {
  double n = 0, sum = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (mask[i]) n += 1, sum += x[i];
  if (n < 2) throw InputError("whitening needs at least 2 completion tokens in the batch");
  const double mean = sum / n;
  double ss = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (mask[i]) ss += (x[i] - mean) * (x[i] - mean);
  const double var = ss / n * (n / (n - 1.0));  // masked_var(unbiased=True)
  const double inv = 1.0 / std::sqrt(var + 1e-8);
  std::vector<double> out(x.begin(), x.end());
  for (size_t i = 0; i < x.size(); ++i)
    if (mask[i]) out[i] = (x[i] - mean) * inv + (shift_mean ? 0.0 : mean);
  return out;
}

PpoAdvantages ppo_advantages(const Batch& batch, std::span<const float> scores,
                             std::span<const float> logp, std::span<const float> ref_logp,
                             std::span<const float> values, const PpoRolloutConfig& cfg) {
  const SequenceRows rows(batch);
  const int64_t T = rows.num_rows(), S = rows.num_sequences();
  if (static_cast<int64_t>(scores.size()) != S)
    throw InputError("ppo: " + std::to_string(scores.size()) + " scores for " +
                     std::to_string(S) + " sequences");
  for (const auto* v : {&logp, &ref_logp, &values}) {
    if (static_cast<int64_t>(v->size()) != T)
      throw InputError("ppo: per-token inputs must have " + std::to_string(T) + " entries, got " +
                       std::to_string(v->size()));
  }
  std::vector<bool> step(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) step[static_cast<size_t>(t)] = rows.weight[static_cast<size_t>(t)] > 0.0f;

  PpoAdvantages out;
  std::vector<double> r(static_cast<size_t>(T), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    int64_t last = -1;
    double kl_sum = 0;
    for (int64_t t = rows.begin[s]; t < rows.begin[s + 1]; ++t) {
      const size_t i = static_cast<size_t>(t);
      if (!step[i]) continue;
      const double kl = cfg.kl_estimator == KlEstimator::k1 ? kl_k1(logp[i], ref_logp[i]).value
                                                            : kl_k3(logp[i], ref_logp[i]).value;
      r[i] = -cfg.kl_coef * kl;
      kl_sum += kl;
      last = t;
    }
    if (last < 0) throw InputError("ppo: sequence " + std::to_string(s) + " has no completion token");
    r[static_cast<size_t>(last)] += scores[static_cast<size_t>(s)];
    out.mean_kl += kl_sum / static_cast<double>(S);
    out.mean_non_score_reward += -cfg.kl_coef * kl_sum / static_cast<double>(S);
    out.mean_score += scores[static_cast<size_t>(s)] / static_cast<double>(S);
  }
  if (cfg.whiten_rewards) r = masked_whiten(r, step, /*shift_mean=*/false);

  // GAE, each sequence's steps from last to first.
  std::vector<double> adv(static_cast<size_t>(T), 0.0), ret(static_cast<size_t>(T), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    double next_value = 0.0, next_adv = 0.0;
    for (int64_t t = rows.begin[s + 1] - 1; t >= rows.begin[s]; --t) {
      const size_t i = static_cast<size_t>(t);
      if (!step[i]) continue;
      const double delta = r[i] + cfg.gamma * next_value - values[i];
      adv[i] = delta + cfg.gamma * cfg.lam * next_adv;
      ret[i] = adv[i] + values[i];
      next_value = values[i];
      next_adv = adv[i];
    }
  }
  const std::vector<double> white = masked_whiten(adv, step, /*shift_mean=*/true);
  out.advantages.assign(static_cast<size_t>(T), 0.0f);
  out.returns.assign(static_cast<size_t>(T), 0.0f);
  out.rewards.assign(static_cast<size_t>(T), 0.0f);
  for (size_t i = 0; i < static_cast<size_t>(T); ++i) {
    if (!step[i]) continue;
    out.advantages[i] = static_cast<float>(white[i]);
    out.returns[i] = static_cast<float>(ret[i]);
    out.rewards[i] = static_cast<float>(r[i]);
  }
  return out;
}

}  // namespace sbp
