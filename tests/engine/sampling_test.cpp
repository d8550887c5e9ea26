// Next-token choice (engine/sampling.h): greedy ties, the filters' kept sets, frequencies that
// follow softmax(logits / temperature), one draw per token, and the model log-prob.
#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "core/error.h"

namespace sbp {
namespace {

// Logits whose softmax is `probs` exactly up to rounding.
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Frequencies of choose_token over n draws.
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p, int n) {
  Rng rng(42, "sampling-test");
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) f[static_cast<size_t>(choose_token(logits, p, rng))] += 1.0 / n;
  return f;
}

TEST(Sampling, GreedyTakesTheFirstLargestAndDrawsNothing) {
  Rng rng(1), untouched(1);
  SamplingParams p;
  p.greedy = true;
  EXPECT_EQ(choose_token(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}, p, rng), 1);
  EXPECT_EQ(rng.next(), untouched.next());
}

TEST(Sampling, OneUniformPerDraw) {
  Rng rng(3), mirror(3);
  SamplingParams p;
  choose_token(logits_of({0.25, 0.25, 0.5}), p, rng);
  mirror.uniform();
  EXPECT_EQ(rng.next(), mirror.next());
}

TEST(Sampling, FrequenciesFollowTheTemperedSoftmax) {
  const std::vector<float> l = {1.0f, 0.0f, -0.5f, 2.0f};
  SamplingParams p;
  p.temperature = 2.0;
  const std::vector<double> f = frequencies(l, p, 40000);
  double z = 0.0;
  for (float x : l) z += std::exp(x / 2.0);
  for (size_t j = 0; j < l.size(); ++j) {
    const double q = std::exp(l[j] / 2.0) / z;
    // 40000 draws: a standard deviation below 0.0025; 4 sigma.
    EXPECT_NEAR(f[j], q, 0.01) << "token " << j;
  }
}

TEST(Sampling, FiltersKeepTheDocumentedSets) {
  const std::vector<float> l = logits_of({0.05, 0.5, 0.15, 0.3});
  SamplingParams p;
  p.top_k = 2;  // {1, 3}, renormalised 0.5 : 0.3
  std::vector<double> f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0] + f[2], 0.0);
  EXPECT_NEAR(f[1], 0.625, 0.015);

  p = SamplingParams();
  p.top_p = 0.75;  // 0.5 < 0.75 <= 0.8: {1, 3}
  f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0] + f[2], 0.0);
  p.top_p = 0.85;  // needs 0.5 + 0.3 + 0.15: {1, 3, 2}
  f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_GT(f[2], 0.1);

  p = SamplingParams();
  p.min_p = 0.2;  // floor 0.2 * 0.5 = 0.1: {1, 3, 2}
  f = frequencies(l, p, 20000);
  EXPECT_EQ(f[0], 0.0);
  EXPECT_GT(f[2], 0.1);

  p = SamplingParams();
  p.top_k = 1;  // always the best, whatever the draw
  f = frequencies(l, p, 100);
  EXPECT_EQ(f[0] + f[2] + f[3], 0.0);
}

TEST(Sampling, TokenLogprobIsTheModelsLogSoftmax) {
  const std::vector<float> l = {3.0f, -1.0f, 0.25f};
  double z = 0.0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(token_logprob(l, j), l[j] - std::log(z), 1e-12);
  // Large logits: no overflow.
  EXPECT_NEAR(token_logprob(std::vector<float>{1000.0f, 1000.0f}, 0), std::log(0.5), 1e-12);
}

TEST(Sampling, OutOfRangeParametersAreErrors) {
  const auto message = [](auto set) {
    SamplingParams p;
    set(p);
    try {
      p.validate("config.yaml: grpo");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = 0.0; }),
            "config.yaml: grpo: temperature must be a finite number > 0");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_p = 0.0; }),
            "config.yaml: grpo: top_p must be in (0, 1]");
  EXPECT_EQ(message([](SamplingParams& p) { p.min_p = 1.0; }),
            "config.yaml: grpo: min_p must be in [0, 1)");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_k = -1; }),
            "config.yaml: grpo: top_k must be >= 0 (0 = no limit)");
  EXPECT_EQ(message([](SamplingParams&) {}), "<no error>");
}

}  // namespace
}  // namespace sbp
