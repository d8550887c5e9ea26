// GRPO group advantages and PPO's rewards / GAE / whitening on small hand-checked examples.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "objective/gae.h"
#include "objective/group_advantages.h"
#include "objective/sequence_rows.h"

namespace sbp {
namespace {

TEST(GroupAdvantages, GroupBatchNone) {
  const std::vector<float> r = {1, 2, 3, 10, 10, 10};  // two groups of 3
  // group: mean 2, unbiased std 1 -> (-1, 0, 1) / (1 + 1e-4); the constant group -> 0.
  const std::vector<float> g = group_advantages(r, 3, ScaleRewards::group);
  EXPECT_NEAR(g[0], -1 / 1.0001, 1e-6);
  EXPECT_NEAR(g[1], 0.0, 1e-7);
  EXPECT_NEAR(g[2], 1 / 1.0001, 1e-6);
  EXPECT_EQ(g[3], 0.0f);
  // batch: group means, one std over all six rewards.
  double m = 0, ss = 0;
  for (float v : r) m += v / 6.0;
  for (float v : r) ss += (v - m) * (v - m);
  const double std6 = std::sqrt(ss / 5.0);
  const std::vector<float> b = group_advantages(r, 3, ScaleRewards::batch);
  EXPECT_NEAR(b[0], -1 / (std6 + 1e-4), 1e-6);
  EXPECT_NEAR(b[5], 0.0, 1e-7);
  const std::vector<float> n = group_advantages(r, 3, ScaleRewards::none);
  EXPECT_EQ(n[0], -1.0f);
  EXPECT_EQ(n[2], 1.0f);
  EXPECT_THROW(group_advantages(r, 4, ScaleRewards::group), InputError);
  EXPECT_THROW(parse_scale_rewards("sequence"), InputError);
}

TEST(MaskedWhiten, UnbiasedVarianceAndShift) {
  const std::vector<double> x = {1, 100, 2, 3};
  const std::vector<bool> mask = {true, false, true, true};
  const std::vector<double> w = masked_whiten(x, mask, true);
  // mean 2, unbiased var 1
  EXPECT_NEAR(w[0], -1 / std::sqrt(1 + 1e-8), 1e-12);
  EXPECT_EQ(w[1], 100);  // outside the mask: untouched
  EXPECT_NEAR(w[3], 1 / std::sqrt(1 + 1e-8), 1e-12);
  const std::vector<double> k = masked_whiten(x, mask, false);
  EXPECT_NEAR(k[0], 2 - 1 / std::sqrt(1 + 1e-8), 1e-12);
}

TEST(PpoAdvantages, RewardsGaeReturnsByHand) {
  // Two sequences: [p, c, c, c] and [p, p, c, c]; rows predicting completions are scored.
  const Batch b = prompt_completion_batch({{{5}, {1, 2, 3}}, {{6, 7}, {4, 8}}});
  const SequenceRows rows(b);
  // scored rows: 0,1,2 (seq 0) and 5,6 (seq 1)
  std::vector<float> w(rows.weight.begin(), rows.weight.end());
  ASSERT_EQ(w, (std::vector<float>{1, 1, 1, 0, 0, 1, 1, 0}));
  const std::vector<float> logp = {-1, -2, -1.5f, 0, 0, -0.5f, -1, 0};
  const std::vector<float> ref = {-1.2f, -1.5f, -1.5f, 0, 0, -0.7f, -2, 0};
  const std::vector<float> val = {0.1f, 0.2f, 0.3f, 0, 0, -0.1f, 0.4f, 0};
  const std::vector<float> scores = {1.0f, -2.0f};
  PpoRolloutConfig cfg;
  cfg.kl_coef = 0.1;
  cfg.gamma = 0.9;
  cfg.lam = 0.8;
  const PpoAdvantages a = ppo_advantages(b, scores, logp, ref, val, cfg);
  // k1 rewards: -0.1 (logp - ref), score at the last step
  const std::vector<double> r = {-0.1 * 0.2, -0.1 * -0.5, 0.0 + 1.0,        0,
                                 0,          -0.1 * 0.2,  -0.1 * 1.0 - 2.0, 0};
  for (size_t t : {0u, 1u, 2u, 5u, 6u}) EXPECT_NEAR(a.rewards[t], r[t], 1e-6) << t;
  // GAE by hand
  std::vector<double> A(8, 0.0), R(8, 0.0);
  auto gae = [&](std::vector<size_t> steps) {
    double next_v = 0, next_a = 0;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      const size_t t = *it;
      const double delta = r[t] + 0.9 * next_v - val[t];
      A[t] = delta + 0.9 * 0.8 * next_a;
      R[t] = A[t] + val[t];
      next_v = val[t];
      next_a = A[t];
    }
  };
  gae({0, 1, 2});
  gae({5, 6});
  double mean = 0;
  for (size_t t : {0u, 1u, 2u, 5u, 6u}) mean += A[t] / 5;
  double var = 0;
  for (size_t t : {0u, 1u, 2u, 5u, 6u}) var += (A[t] - mean) * (A[t] - mean) / 4;
  for (size_t t : {0u, 1u, 2u, 5u, 6u}) {
    EXPECT_NEAR(a.returns[t], R[t], 1e-6) << t;
    EXPECT_NEAR(a.advantages[t], (A[t] - mean) / std::sqrt(var + 1e-8), 1e-5) << t;
  }
  for (size_t t : {3u, 4u, 7u}) {
    EXPECT_EQ(a.advantages[t], 0.0f);
    EXPECT_EQ(a.returns[t], 0.0f);
  }
  EXPECT_NEAR(a.mean_score, -0.5, 1e-12);
  // k3 KL is never negative.
  cfg.kl_estimator = KlEstimator::k3;
  const PpoAdvantages k3 = ppo_advantages(b, scores, logp, ref, val, cfg);
  EXPECT_GE(k3.mean_kl, 0.0);
  EXPECT_THROW(ppo_advantages(b, std::vector<float>{1.0f}, logp, ref, val, cfg), InputError);
}

}  // namespace
}  // namespace sbp
