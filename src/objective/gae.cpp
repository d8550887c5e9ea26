#include "objective/gae.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "objective/sequence_rows.h"
#include "objective/token_terms.h"

namespace sbp {

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

namespace {

double token_kl(float logp, float ref, KlEstimator e) {
  return e == KlEstimator::k1 ? kl_k1(logp, ref).value : kl_k3(logp, ref).value;
}

}  // namespace

int64_t check_ppo_rollout_part(const Batch& batch, size_t scores) {
  const SequenceRows rows(batch);
  const int64_t S = rows.num_sequences();
  if (static_cast<int64_t>(scores) != S)
    throw InputError("ppo: " + std::to_string(scores) + " scores for " + std::to_string(S) +
                     " sequences");
  int64_t steps = 0;
  for (int64_t s = 0; s < S; ++s) {
    int64_t mine = 0;
    for (int64_t t = rows.begin[s]; t < rows.begin[s + 1]; ++t)
      mine += rows.weight[static_cast<size_t>(t)] > 0.0f ? 1 : 0;
    if (mine == 0)
      throw InputError("ppo: sequence " + std::to_string(s) + " has no completion token");
    steps += mine;
  }
  return steps;
}

PpoAdvantages ppo_rollout_means(const PpoRolloutPart& p, const PpoRolloutConfig& cfg) {
  const SequenceRows rows(*p.batch);
  const int64_t S = rows.num_sequences();
  PpoAdvantages out;
  for (int64_t s = 0; s < S; ++s) {
    double kl_sum = 0;
    for (int64_t t = rows.begin[s]; t < rows.begin[s + 1]; ++t) {
      const size_t i = static_cast<size_t>(t);
      if (rows.weight[i] > 0.0f) kl_sum += token_kl(p.logp[i], p.ref_logp[i], cfg.kl_estimator);
    }
    out.mean_kl += kl_sum / static_cast<double>(S);
    out.mean_non_score_reward += -cfg.kl_coef * kl_sum / static_cast<double>(S);
    out.mean_score += p.scores[static_cast<size_t>(s)] / static_cast<double>(S);
  }
  return out;
}

namespace {

// One part's per-token quantities in double precision, before and after the step's whitening.
struct PartRollout {
  int64_t T = 0;
  std::vector<bool> step;  // (T) completion rows
  std::vector<double> r;   // (T) per-token rewards
  std::vector<double> adv, ret;
};

// Per-token rewards of one part: -kl_coef * kl on its completion rows, the score at each
// sequence's last one; fills the part's means.
PartRollout part_rewards(const PpoRolloutPart& p, const PpoRolloutConfig& cfg, PpoAdvantages& out) {
  check_ppo_rollout_part(*p.batch, p.scores.size());
  const SequenceRows rows(*p.batch);
  const int64_t T = rows.num_rows(), S = rows.num_sequences();
  for (const auto* v : {&p.logp, &p.ref_logp, &p.values}) {
    if (static_cast<int64_t>(v->size()) != T)
      throw InputError("ppo: per-token inputs must have " + std::to_string(T) + " entries, got " +
                       std::to_string(v->size()));
  }
  out = ppo_rollout_means(p, cfg);
  PartRollout part;
  part.T = T;
  part.step.assign(static_cast<size_t>(T), false);
  for (int64_t t = 0; t < T; ++t)
    part.step[static_cast<size_t>(t)] = rows.weight[static_cast<size_t>(t)] > 0.0f;
  part.r.assign(static_cast<size_t>(T), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    int64_t last = -1;
    for (int64_t t = rows.begin[s]; t < rows.begin[s + 1]; ++t) {
      const size_t i = static_cast<size_t>(t);
      if (!part.step[i]) continue;
      part.r[i] = -cfg.kl_coef * token_kl(p.logp[i], p.ref_logp[i], cfg.kl_estimator);
      last = t;
    }
    part.r[static_cast<size_t>(last)] += p.scores[static_cast<size_t>(s)];
  }
  return part;
}

// GAE over each sequence's steps, last to first (V after the last step = 0).
void part_gae(const PpoRolloutPart& p, const PpoRolloutConfig& cfg, PartRollout& part) {
  const SequenceRows rows(*p.batch);
  part.adv.assign(static_cast<size_t>(part.T), 0.0);
  part.ret.assign(static_cast<size_t>(part.T), 0.0);
  for (int64_t s = 0; s < rows.num_sequences(); ++s) {
    double next_value = 0.0, next_adv = 0.0;
    for (int64_t t = rows.begin[s + 1] - 1; t >= rows.begin[s]; --t) {
      const size_t i = static_cast<size_t>(t);
      if (!part.step[i]) continue;
      const double delta = part.r[i] + cfg.gamma * next_value - p.values[i];
      part.adv[i] = delta + cfg.gamma * cfg.lam * next_adv;
      part.ret[i] = part.adv[i] + p.values[i];
      next_value = p.values[i];
      next_adv = part.adv[i];
    }
  }
}

// masked_whiten with the statistics of every rank's parts (the same formulas).
void whiten_across_ranks(std::vector<PartRollout>& parts, std::vector<double> PartRollout::*field,
                         bool shift_mean, const SumOverRanks& sum_over_ranks) {
  double count_sum[2] = {0.0, 0.0};
  for (const PartRollout& p : parts)
    for (size_t i = 0; i < p.step.size(); ++i)
      if (p.step[i]) count_sum[0] += 1, count_sum[1] += (p.*field)[i];
  sum_over_ranks(count_sum);
  const double n = count_sum[0];
  if (n < 2) throw InputError("whitening needs at least 2 completion tokens in the batch");
  const double mean = count_sum[1] / n;
  double ss = 0;
  for (const PartRollout& p : parts)
    for (size_t i = 0; i < p.step.size(); ++i)
      if (p.step[i]) ss += ((p.*field)[i] - mean) * ((p.*field)[i] - mean);
  sum_over_ranks(std::span<double>(&ss, 1));
  const double var = ss / n * (n / (n - 1.0));
  const double inv = 1.0 / std::sqrt(var + 1e-8);
  for (PartRollout& p : parts)
    for (size_t i = 0; i < p.step.size(); ++i)
      if (p.step[i]) (p.*field)[i] = ((p.*field)[i] - mean) * inv + (shift_mean ? 0.0 : mean);
}

// masked_whiten of one per-token field over the rows of every part, in part order.
void whiten_over_parts(std::vector<PartRollout>& parts, std::vector<double> PartRollout::*field,
                       bool shift_mean, const SumOverRanks& sum_over_ranks) {
  if (sum_over_ranks) {
    whiten_across_ranks(parts, field, shift_mean, sum_over_ranks);
    return;
  }
  std::vector<double> all;
  std::vector<bool> mask;
  for (const PartRollout& p : parts) {
    all.insert(all.end(), (p.*field).begin(), (p.*field).end());
    mask.insert(mask.end(), p.step.begin(), p.step.end());
  }
  const std::vector<double> white = masked_whiten(all, mask, shift_mean);
  size_t at = 0;
  for (PartRollout& p : parts) {
    std::copy(white.begin() + static_cast<std::ptrdiff_t>(at),
              white.begin() + static_cast<std::ptrdiff_t>(at + (p.*field).size()),
              (p.*field).begin());
    at += (p.*field).size();
  }
}

}  // namespace

std::vector<PpoAdvantages> ppo_step_advantages(std::span<const PpoRolloutPart> parts,
                                               const PpoRolloutConfig& cfg,
                                               const SumOverRanks& sum_over_ranks) {
  std::vector<PpoAdvantages> out(parts.size());
  std::vector<PartRollout> rollouts;
  for (size_t k = 0; k < parts.size(); ++k) rollouts.push_back(part_rewards(parts[k], cfg, out[k]));
  if (cfg.whiten_rewards)
    whiten_over_parts(rollouts, &PartRollout::r, /*shift_mean=*/false, sum_over_ranks);
  for (size_t k = 0; k < parts.size(); ++k) part_gae(parts[k], cfg, rollouts[k]);
  whiten_over_parts(rollouts, &PartRollout::adv, /*shift_mean=*/true, sum_over_ranks);
  for (size_t k = 0; k < parts.size(); ++k) {
    const PartRollout& p = rollouts[k];
    PpoAdvantages& o = out[k];
    o.advantages.assign(static_cast<size_t>(p.T), 0.0f);
    o.returns.assign(static_cast<size_t>(p.T), 0.0f);
    o.rewards.assign(static_cast<size_t>(p.T), 0.0f);
    for (size_t i = 0; i < static_cast<size_t>(p.T); ++i) {
      if (!p.step[i]) continue;
      o.advantages[i] = static_cast<float>(p.adv[i]);
      o.returns[i] = static_cast<float>(p.ret[i]);
      o.rewards[i] = static_cast<float>(p.r[i]);
    }
  }
  return out;
}

PpoAdvantages ppo_advantages(const Batch& batch, std::span<const float> scores,
                             std::span<const float> logp, std::span<const float> ref_logp,
                             std::span<const float> values, const PpoRolloutConfig& cfg) {
  const PpoRolloutPart part{&batch, scores, logp, ref_logp, values};
  return std::move(ppo_step_advantages(std::span<const PpoRolloutPart>(&part, 1), cfg).front());
}

}  // namespace sbp
