#include "reward/reward.h"

#include <cmath>
#include <set>

#include "reward/builtin_rewards.h"
#include "reward/command_reward.h"

namespace sbp {

std::unique_ptr<RewardFunction> make_reward(const RewardSpec& spec, const std::string& where) {
  if (!std::isfinite(spec.weight))
    throw InputError(where + ": weight must be a finite number");
  if (spec.type == "accuracy") {
    if (spec.answer_field.empty()) throw InputError(where + ": answer_field must not be empty");
    return make_accuracy_reward(spec.answer_field);
  }
  if (spec.type == "format") {
    if (spec.pattern.empty()) throw InputError(where + ": a format reward needs a pattern");
    return make_format_reward(spec.pattern, where + ".pattern");
  }
  if (spec.type == "length") {
    if (spec.max_length < 1)
      throw InputError(where + ": max_length must be at least 1, got " +
                       std::to_string(spec.max_length));
    if (spec.cache_length < 1 || spec.cache_length > spec.max_length)
      throw InputError(where + ": cache_length must be in [1, max_length = " +
                       std::to_string(spec.max_length) + "], got " +
                       std::to_string(spec.cache_length));
    return make_length_reward(spec.max_length, spec.cache_length);
  }
  if (spec.type == "command") {
    if (spec.command.empty() || spec.command[0].empty())
      throw InputError(where + ": a command reward needs a command (program and arguments)");
    if (!(spec.timeout_s > 0.0 && spec.timeout_s <= 86400.0))
      throw InputError(where + ": reward_timeout must be in (0, 86400] seconds");
    return make_command_reward(spec.command, spec.timeout_s);
  }
  throw InputError(where + ": unknown reward type '" + spec.type +
                   "' (known: accuracy, format, length, command)");
}

RewardSet::RewardSet(std::vector<RewardSpec> specs, const std::string& where)
    : specs_(std::move(specs)) {
  if (specs_.empty()) throw InputError(where + ": at least one reward is needed");
  std::set<std::string> names;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (specs_[i].name.empty()) specs_[i].name = specs_[i].type;
    if (!names.insert(specs_[i].name).second)
      throw InputError(at + ": a second reward named '" + specs_[i].name +
                       "' (give each reward of the same type its own `name`)");
    functions_.push_back(make_reward(specs_[i], at));
  }
}

RewardSet::Scores RewardSet::score(std::span<const RewardRequest> requests) {
  Scores s;
  s.total.assign(requests.size(), 0.0);
  for (size_t f = 0; f < functions_.size(); ++f) {
    std::vector<double> r = functions_[f]->score(requests);
    if (r.size() != requests.size())
      throw RewardError("reward '" + specs_[f].name + "' returned " + std::to_string(r.size()) +
                        " rewards for " + std::to_string(requests.size()) + " completions");
    for (size_t i = 0; i < r.size(); ++i) {
      if (!std::isfinite(r[i]))
        throw RewardError("reward '" + specs_[f].name + "' is not finite for completion " +
                          std::to_string(i));
      s.total[i] += specs_[f].weight * r[i];
    }
    s.per_reward.push_back(std::move(r));
  }
  return s;
}

}  // namespace sbp
