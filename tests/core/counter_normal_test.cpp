// The counter-based normal numbers of Backend::fill_normal (core/counter_normal.h): its own log
// against the library's (to a few ulp of double, over the range its pairs reach), and the
// distribution: 200,000 numbers against the normal CDF (Kolmogorov-Smirnov statistic below its
// 0.1% critical value, 1.95 / sqrt(n)), numbers of different indices, streams and seeds apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/counter_normal.h"
#include "core/rng.h"

namespace sbp {
namespace {

TEST(CounterNormal, LogWithinAFewUlpOfTheLibrarys) {
  Rng rng(3);
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    // s in (2^-104, 1): the range x^2 + y^2 of the polar method's accepted pairs.
    const double s = (1.0 + rng.uniform()) * std::ldexp(1.0, -static_cast<int>(rng.below(105)) - 1);
    const long double want = std::log(static_cast<long double>(s));
    const double err = static_cast<double>(std::fabs((counter_normal_log(s) - want) / want));
    worst = std::max(worst, std::isfinite(err) ? err : 0.0);
  }
  EXPECT_LT(worst, 8 * std::ldexp(1.0, -53)) << worst;
  EXPECT_LT(std::fabs(counter_normal_log(std::nextafter(1.0, 0.0)) + std::ldexp(1.0, -53)),
            std::ldexp(1.0, -100));
}

TEST(CounterNormal, NumbersFollowTheNormalDistribution) {
  const int n = 200000;
  const uint64_t key = counter_normal_key(42, 7);
  std::vector<double> z(n);
  for (int i = 0; i < n; ++i) z[static_cast<size_t>(i)] = counter_normal(key, static_cast<uint64_t>(i));
  std::sort(z.begin(), z.end());
  double ks = 0;
  for (int i = 0; i < n; ++i) {
    const double cdf = 0.5 * std::erfc(-z[static_cast<size_t>(i)] / std::sqrt(2.0));
    ks = std::max({ks, std::fabs(cdf - static_cast<double>(i) / n),
                   std::fabs(cdf - static_cast<double>(i + 1) / n)});
  }
  EXPECT_LT(ks, 1.95 / std::sqrt(static_cast<double>(n)));
}

TEST(CounterNormal, IndicesStreamsAndSeedsGiveOtherNumbers) {
  const uint64_t a = counter_normal_key(1, 2), b = counter_normal_key(1, 3),
                 c = counter_normal_key(2, 2);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same += counter_normal(a, i) == counter_normal(a, i + 1);
    same += counter_normal(a, i) == counter_normal(b, i);
    same += counter_normal(a, i) == counter_normal(c, i);
  }
  EXPECT_EQ(same, 0);
  EXPECT_EQ(counter_normal(a, 123), counter_normal(a, 123));  // a function of its counter
}

}  // namespace
}  // namespace sbp
