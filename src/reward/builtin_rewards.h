#pragma once
// The built-in reward functions (reward.h documents their rules).
#include <memory>
#include <string>

#include "reward/reward.h"

namespace sbp {

std::unique_ptr<RewardFunction> make_accuracy_reward(std::string answer_field);
// Throws InputError naming `where` if the pattern does not compile.
std::unique_ptr<RewardFunction> make_format_reward(const std::string& pattern,
                                                   const std::string& where);
std::unique_ptr<RewardFunction> make_length_reward(int64_t max_length, int64_t cache_length);

}  // namespace sbp
