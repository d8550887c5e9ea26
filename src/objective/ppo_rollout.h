#pragma once
// PPO's rollout constants (objective/gae.h: per-token rewards, GAE, the two whitenings) as
// functions of one sequence, so that a backend computes them where the rollout's log-probs and
// values already are (objective_kernels.h's ppo_rollout_rows: on a GPU, one thread per sequence,
// without the host; docs/CUDA.md "Synchronisations"). objective/gae.cpp computes the same
// quantities on the host with its own loops: it is these functions' reference in
// tests/backend/ops_head_test.cpp.
//
// A step's rows are its micro-batches' rows one after another (sequences never span two), and
// S sequences begin at begin[s]. The whitenings are over every completion row of the step, so
// their statistics need every sequence: each is two phases (count and sum, then the squared
// deviations from the mean), and each phase writes one per-sequence partial that the next
// phase's threads add up, in sequence order, each for itself. Phases, in order:
//
//   kRewardMoments, kRewardSpread   only with whiten_rewards: the rewards' statistics
//   kAdvantageMoments, kAdvantageSpread   GAE over the (whitened) rewards: its statistics
//   kRows                           the policy's (T, 4) and the value model's (T, 3) rows
//
// Everything is recomputed from the inputs in each phase (a few flops per row), so the only
// scratch is the partials: (4, S, 2) doubles.
#include <cstdint>

#include "core/host_device.h"
#include "objective/policy_terms.h"

namespace sbp {

enum class KlEstimator { k1, k3 };

struct PpoRolloutConfig {
  double kl_coef = 0.05;  // TRL defaults
  KlEstimator kl_estimator = KlEstimator::k1;
  double gamma = 1.0;
  double lam = 0.95;
  bool whiten_rewards = false;
};

enum PpoRolloutPhase : int {
  kRewardMoments = 0,
  kRewardSpread = 1,
  kAdvantageMoments = 2,
  kAdvantageSpread = 3,
  kRows = 4,
};

// A sequence's constants as the backend holds them, (S, 3) F32 in this order: its score, and
// the loss weights its completion rows get in the policy's and the value model's rows.
enum PpoSequenceField : int { kSeqScore = 0, kSeqPolicyWeight = 1, kSeqValueWeight = 2 };
inline constexpr int kPpoSequenceWidth = 3;

// The inputs of one step: logp (the sampling policy's), ref, values and weight (T); begin
// (S + 1); seq (S, 3). moments: (4, S, 2) doubles, written by the phases before kRows.
struct PpoRolloutInputs {
  const float* logp = nullptr;
  const float* ref = nullptr;
  const float* values = nullptr;
  const float* weight = nullptr;
  const int32_t* begin = nullptr;
  const float* seq = nullptr;
  int64_t S = 0;
};

// The outputs of kRows: policy rows (T, 4) as objective/policy_terms.h's PolicyRowField (old_logp,
// ref 0, advantage, loss weight) and value rows (T, 3) as ValueRowField (old value, return,
// loss weight). Rows outside completions get advantage, return and loss weights 0.
struct PpoRolloutRows {
  float* policy = nullptr;
  float* value = nullptr;
};

// A whitening's statistics from its two phases' partials: the mean of the masked values and
// 1 / sqrt(unbiased variance + 1e-8), TRL's masked_whiten.
struct Whitening {
  double mean = 0.0, inv = 1.0;
};

SBP_HD double ppo_token_kl(double logp, double ref, KlEstimator e) {
  return e == KlEstimator::k1 ? logp - ref : kl_k3(logp, ref).value;
}

// The mean from a moments phase's partials (count, sum per sequence), in sequence order.
SBP_HD double ppo_phase_mean(const double* moments, int64_t S) {
  double n = 0.0, sum = 0.0;
  for (int64_t s = 0; s < S; ++s) n += moments[2 * s], sum += moments[2 * s + 1];
  return sum / n;
}

// The whitening of a moments phase and the spread phase after it.
SBP_HD Whitening ppo_whitening(const double* moments, const double* spread, int64_t S) {
  double n = 0.0, ss = 0.0;
  for (int64_t s = 0; s < S; ++s) n += moments[2 * s], ss += spread[2 * s];
  Whitening w;
  w.mean = ppo_phase_mean(moments, S);
  const double var = ss / n * (n / (n - 1.0));  // masked_var(unbiased=True)
  w.inv = 1.0 / sqrt(var + 1e-8);
  return w;
}

// Runs phase `phase` for sequence s: writes its partial into moments (phases before kRows) or
// its rows (kRows). The phases before `phase` must have run for every sequence.
SBP_HD void ppo_rollout_sequence(int phase, int64_t s, const PpoRolloutConfig& cfg,
                                 const PpoRolloutInputs& in, double* moments, PpoRolloutRows out) {
  const int64_t S = in.S, b = in.begin[s], e = in.begin[s + 1];
  double* part = moments + 2 * (phase * S + s);  // this phase's partial of sequence s
  const float* m = in.weight;
  int64_t last = -1;  // the sequence's last completion row: its score's
  for (int64_t t = e - 1; t >= b && last < 0; --t)
    if (m[t] > 0.0f) last = t;
  const double score = in.seq[s * kPpoSequenceWidth + kSeqScore];
  auto reward = [&](int64_t t) {  // r_t, before the optional whitening
    double r = -cfg.kl_coef * ppo_token_kl(in.logp[t], in.ref[t], cfg.kl_estimator);
    return t == last ? r + score : r;
  };
  if (phase == kRewardMoments || phase == kRewardSpread) {
    const double mean = phase == kRewardSpread ? ppo_phase_mean(moments, S) : 0.0;
    double a = 0.0, c = 0.0;
    for (int64_t t = b; t < e; ++t) {
      if (!(m[t] > 0.0f)) continue;
      const double r = reward(t);
      if (phase == kRewardMoments) {
        a += 1.0, c += r;
      } else {
        a += (r - mean) * (r - mean);
      }
    }
    part[0] = a, part[1] = c;
    return;
  }
  // GAE from the last row to the first (V after the last step = 0), over the rewards whitened
  // with shift_mean = false when asked.
  Whitening rw;
  if (cfg.whiten_rewards)
    rw = ppo_whitening(moments + 2 * kRewardMoments * S, moments + 2 * kRewardSpread * S, S);
  Whitening aw;
  if (phase == kAdvantageSpread) aw.mean = ppo_phase_mean(moments + 2 * kAdvantageMoments * S, S);
  if (phase == kRows)
    aw = ppo_whitening(moments + 2 * kAdvantageMoments * S, moments + 2 * kAdvantageSpread * S, S);
  const float* sq = in.seq + s * kPpoSequenceWidth;
  double next_value = 0.0, next_adv = 0.0, a = 0.0, c = 0.0;
  for (int64_t t = e - 1; t >= b; --t) {
    const bool step = m[t] > 0.0f;
    if (phase == kRows) {
      float* p = out.policy + t * kPolicyRowWidth;
      float* v = out.value + t * kValueRowWidth;
      p[kOldLogp] = in.logp[t], p[kRefLogp] = 0.0f, p[kAdvantage] = 0.0f;
      p[kLossWeight] = step ? sq[kSeqPolicyWeight] : 0.0f;
      v[kOldValue] = in.values[t], v[kReturn] = 0.0f;
      v[kValueWeight] = step ? sq[kSeqValueWeight] : 0.0f;
    }
    if (!step) continue;
    double r = reward(t);
    if (cfg.whiten_rewards) r = (r - rw.mean) * rw.inv + rw.mean;
    const double V = in.values[t];
    const double adv = r + cfg.gamma * next_value - V + cfg.gamma * cfg.lam * next_adv;
    next_value = V, next_adv = adv;
    if (phase == kAdvantageMoments) {
      a += 1.0, c += adv;
    } else if (phase == kAdvantageSpread) {
      a += (adv - aw.mean) * (adv - aw.mean);
    } else {
      out.policy[t * kPolicyRowWidth + kAdvantage] = static_cast<float>((adv - aw.mean) * aw.inv);
      out.value[t * kValueRowWidth + kReturn] = static_cast<float>(adv + V);
    }
  }
  if (phase != kRows) part[0] = a, part[1] = c;
}

}  // namespace sbp
