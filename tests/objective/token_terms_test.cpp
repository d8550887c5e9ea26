// Finite-difference checks of the scalar formulas every objective is built from
// (objective/token_terms.h), in each regime of their kinks, plus the autograd conventions at
// the kinks themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "objective/token_terms.h"

namespace sbp {
namespace {

// Central difference of f at x (double precision: the formulas are evaluated in double).
double fd(const std::function<double(double)>& f, double x, double h = 1e-6) {
  return (f(x + h) - f(x - h)) / (2 * h);
}

void expect_derivative(const std::function<Term(double)>& term, double x, const char* what) {
  const double analytic = term(x).d;
  const double numeric = fd([&](double v) { return term(v).value; }, x);
  EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::fabs(numeric))) << what << " at " << x;
}

TEST(TokenTerms, ClippedSurrogateEveryRegime) {
  // (logp - old) chosen so r lies inside, below and above [1 - 0.2, 1 + 0.28], for both signs
  // of the advantage: 6 regimes, of which 2 are clipped (zero gradient).
  for (double adv : {1.3, -0.7}) {
    for (double delta : {-0.6, -0.1, 0.0, 0.05, 0.2, 0.5}) {
      const double old = -2.0;
      auto f = [&](double lp) { return clipped_surrogate(lp, old, adv, 0.2, 0.28); };
      expect_derivative(f, old + delta, "clipped_surrogate");
      const double r = std::exp(delta);
      const bool clipped = (adv > 0 && r > 1.28) || (adv < 0 && r < 0.8);
      if (clipped)
        EXPECT_EQ(f(old + delta).d, 0.0);
      else
        EXPECT_DOUBLE_EQ(f(old + delta).d, -adv * r);
      EXPECT_EQ(clipped_low(old + delta, old, adv, 0.2), adv < 0 && r < 0.8);
      EXPECT_EQ(clipped_high(old + delta, old, adv, 0.28), adv > 0 && r > 1.28);
    }
  }
  // Ratio exactly 1 (old = current, detached): value -A, gradient -A.
  const Term t = clipped_surrogate(-1.5, -1.5, 0.4, 0.2, 0.2);
  EXPECT_DOUBLE_EQ(t.value, -0.4);
  EXPECT_DOUBLE_EQ(t.d, -0.4);
}

TEST(TokenTerms, KlEstimators) {
  for (double lp : {-3.0, -1.0, -0.2}) {
    for (double ref : {-2.5, -1.0, -0.1}) {
      expect_derivative([&](double x) { return kl_k3(x, ref); }, lp, "k3");
      expect_derivative([&](double x) { return kl_k1(x, ref); }, lp, "k1");
      EXPECT_GE(kl_k3(lp, ref).value, 0.0);
    }
  }
  EXPECT_EQ(kl_k3(-1.0, -1.0).value, 0.0);
  EXPECT_EQ(kl_k3(-1.0, -1.0).d, 0.0);
}

TEST(TokenTerms, ClippedValueLossEveryRegime) {
  const double vold = 0.5, ret = 1.0, eps = 0.2;
  // inside the clip range; below/above it with either branch the larger
  for (double v : {0.45, 0.6, 0.1, 0.95, 1.5, 2.0, -0.5}) {
    expect_derivative([&](double x) { return clipped_value_loss(x, vold, ret, eps); }, v,
                      "clipped_value_loss");
  }
  // Inside the range both branches agree: the full 2 (v - R).
  EXPECT_DOUBLE_EQ(clipped_value_loss(0.6, vold, ret, eps).d, 2 * (0.6 - ret));
  // Outside, the clipped branch larger: gradient 0 (clamp is constant there).
  EXPECT_EQ(clipped_value_loss(0.95, vold, ret, eps).d, 0.0);
}

TEST(TokenTerms, DpoPairLosses) {
  for (double z : {-3.0, -0.4, 0.0, 0.7, 5.0}) {
    for (double ls : {0.0, 0.1}) {
      expect_derivative([&](double x) { return dpo_pair_loss(x, DpoLoss::sigmoid, 0.1, ls); }, z,
                        "sigmoid");
    }
    expect_derivative([&](double x) { return dpo_pair_loss(x, DpoLoss::ipo, 0.1, 0.0); }, z, "ipo");
    if (std::fabs(1 - 0.5 * z) > 1e-3)
      expect_derivative([&](double x) { return dpo_pair_loss(x, DpoLoss::hinge, 0.5, 0.0); }, z,
                        "hinge");
  }
  // z = 0, no smoothing: log 2, slope -beta / 2.
  EXPECT_NEAR(dpo_pair_loss(0.0, DpoLoss::sigmoid, 0.1, 0.0).value, std::log(2.0), 1e-15);
  EXPECT_NEAR(dpo_pair_loss(0.0, DpoLoss::sigmoid, 0.1, 0.0).d, -0.05, 1e-15);
  // hinge at its kink: relu'(0) = 0 as in PyTorch; ipo's minimum at z = 1 / (2 beta).
  EXPECT_EQ(dpo_pair_loss(2.0, DpoLoss::hinge, 0.5, 0.0).d, 0.0);
  EXPECT_EQ(dpo_pair_loss(5.0, DpoLoss::ipo, 0.1, 0.0).value, 0.0);
  // No overflow far out.
  EXPECT_TRUE(std::isfinite(dpo_pair_loss(-1e4, DpoLoss::sigmoid, 1.0, 0.0).value));
  EXPECT_NEAR(log_sigmoid(-800.0), -800.0, 1e-9);
}

}  // namespace
}  // namespace sbp
