#include "objective/group_advantages.h"

#include <cmath>

#include "core/error.h"

namespace sbp {

ScaleRewards parse_scale_rewards(const std::string& name) {
  return parse_enum<ScaleRewards>(kScaleRewardsNames, name, "scale_rewards");
}

const char* scale_rewards_name(ScaleRewards s) {
  return enum_name<ScaleRewards>(kScaleRewardsNames, s);
}

namespace {
// Mean and unbiased standard deviation (torch.std's default correction of 1; NaN for n = 1,
// as torch gives).
void mean_std(std::span<const float> x, double* mean, double* std) {
  const double n = static_cast<double>(x.size());
  double s = 0.0;
  for (float v : x) s += v;
  *mean = s / n;
  double ss = 0.0;
  for (float v : x) ss += (v - *mean) * (v - *mean);
  *std = x.size() > 1 ? std::sqrt(ss / (n - 1.0)) : NAN;
}
}  // namespace

std::vector<float> group_advantages(std::span<const float> rewards, int64_t G, ScaleRewards scale) {
  const int64_t N = static_cast<int64_t>(rewards.size());
  if (G < 1 || N == 0 || N % G != 0)
    throw InputError("grpo: " + std::to_string(N) + " rewards do not form groups of " +
                     std::to_string(G));
  double batch_mean = 0, batch_std = 0;
  mean_std(rewards, &batch_mean, &batch_std);
  std::vector<float> adv(static_cast<size_t>(N));
  for (int64_t g = 0; g < N / G; ++g) {
    const std::span<const float> grp =
        rewards.subspan(static_cast<size_t>(g * G), static_cast<size_t>(G));
    double mean = 0, std = 0;
    mean_std(grp, &mean, &std);
    const double s = scale == ScaleRewards::batch ? batch_std : std;
    for (int64_t i = 0; i < G; ++i) {
      double a = grp[static_cast<size_t>(i)] - mean;
      if (scale != ScaleRewards::none) a /= s + 1e-4;
      adv[static_cast<size_t>(g * G + i)] = static_cast<float>(a);
    }
  }
  return adv;
}

}  // namespace sbp
