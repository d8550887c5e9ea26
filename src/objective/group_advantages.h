#pragma once
// GRPO advantages from scalar rewards, as TRL v0.23.0 GRPOTrainer computes them
// (_generate_and_score_completions): completions come in groups of `num_generations`
// consecutive entries (one group per prompt);
//   A_i = r_i - mean(group of i)
//   scale_rewards = group: A_i /= std(group of i) + 1e-4      (unbiased std, as torch.std)
//                   batch: A_i /= std(all rewards) + 1e-4     (the mean stays per group)
//                   none:  no scaling
// Computed over the whole generation batch (every prompt's group) before it is split into
// micro-batches: the advantages are constants of the step.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/enum_names.h"

namespace sbp {

enum class ScaleRewards { group, batch, none };
// TRL's older boolean spellings are accepted: true = group, false = none.
inline constexpr EnumName<ScaleRewards> kScaleRewardsNames[] = {
    {ScaleRewards::group, "group"},
    {ScaleRewards::batch, "batch"},
    {ScaleRewards::none, "none"},
    {ScaleRewards::group, "true", true},
    {ScaleRewards::none, "false", true}};
ScaleRewards parse_scale_rewards(const std::string& name);  // InputError naming the choices
const char* scale_rewards_name(ScaleRewards s);

// rewards (N), N a multiple of num_generations >= 1. Returns (N) advantages, in double
// then rounded to float. Throws InputError on a bad shape.
std::vector<float> group_advantages(std::span<const float> rewards, int64_t num_generations,
                                    ScaleRewards scale);

}  // namespace sbp
