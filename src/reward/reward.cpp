#include "reward/reward.h"

#include <cmath>
#include <set>

#include "reward/builtin_rewards.h"
#include "reward/command_reward.h"

namespace sbp {

namespace {

std::unique_ptr<RewardFunction> make_length(const RewardSpec& spec, const std::string& where) {
  if (spec.max_length < 1)
    throw InputError(where + ": max_length must be at least 1, got " +
                     std::to_string(spec.max_length));
  if (spec.cache_length < 1 || spec.cache_length > spec.max_length)
    throw InputError(where + ": cache_length must be in [1, max_length = " +
                     std::to_string(spec.max_length) + "], got " +
                     std::to_string(spec.cache_length));
  return make_length_reward(spec.max_length, spec.cache_length);
}

std::unique_ptr<RewardFunction> make_command(const RewardSpec& spec, const std::string& where) {
  if (spec.command.empty() || spec.command[0].empty())
    throw InputError(where + ": a command reward needs a command (program and arguments)");
  if (!(spec.timeout_s > 0.0 && spec.timeout_s <= 86400.0))
    throw InputError(where + ": reward_timeout must be in (0, 86400] seconds");
  return make_command_reward(spec.command, spec.timeout_s);
}

// The embedding program's function, as the RewardSet owns its functions (the config keeps it).
class SharedReward : public RewardFunction {
 public:
  explicit SharedReward(std::shared_ptr<RewardFunction> f) : f_(std::move(f)) {}
  std::vector<double> score(std::span<const RewardRequest> requests) override {
    return f_->score(requests);
  }

 private:
  std::shared_ptr<RewardFunction> f_;
};

std::unique_ptr<RewardFunction> make_python(const RewardSpec& spec, const std::string& where) {
  if (!spec.function)
    throw InputError(where + ": a python reward is a function given to streambp.train("
                             "reward_funcs=...) in Python; a config file cannot hold one");
  return std::make_unique<SharedReward>(spec.function);
}

}  // namespace

std::string reward_type_list() {
  std::string s;
  for (const EnumName<RewardType>& e : kRewardTypeNames) {
    if (!s.empty()) s += ", ";
    s += e.name;
  }
  return s;
}

RewardType parse_reward_type(const std::string& name, const std::string& where) {
  RewardType type{};
  if (!try_parse_enum<RewardType>(kRewardTypeNames, name, &type))
    throw InputError(where + ": unknown reward type '" + name + "' (known: " +
                     reward_type_list() + ")");
  return type;
}

const char* reward_type_name(RewardType type) {
  return enum_name<RewardType>(kRewardTypeNames, type);
}

std::unique_ptr<RewardFunction> make_reward(const RewardSpec& spec, const std::string& where) {
  if (!std::isfinite(spec.weight))
    throw InputError(where + ": weight must be a finite number");
  switch (spec.type) {
    case RewardType::accuracy:
      if (spec.answer_field.empty()) throw InputError(where + ": answer_field must not be empty");
      return make_accuracy_reward(spec.answer_field);
    case RewardType::format:
      if (spec.pattern.empty()) throw InputError(where + ": a format reward needs a pattern");
      return make_format_reward(spec.pattern, where + ".pattern");
    case RewardType::length: return make_length(spec, where);
    case RewardType::command: return make_command(spec, where);
    case RewardType::python: return make_python(spec, where);
  }
  return nullptr;
}

nlohmann::json reward_spec_json(const RewardSpec& s) {
  nlohmann::json r = {{"type", reward_type_name(s.type)}, {"name", s.name}, {"weight", s.weight}};
  switch (s.type) {
    case RewardType::accuracy: r["answer_field"] = s.answer_field; break;
    case RewardType::format: r["pattern"] = s.pattern; break;
    case RewardType::length:
      r["max_length"] = s.max_length;
      r["cache_length"] = s.cache_length;
      break;
    case RewardType::command:
      r["command"] = s.command;
      if (s.timeout_s > 0.0) r["timeout"] = s.timeout_s;
      break;
    case RewardType::python: break;  // the function itself lives in the Python process only
  }
  return r;
}

RewardSet::RewardSet(std::vector<RewardSpec> specs, const std::string& where)
    : specs_(std::move(specs)) {
  if (specs_.empty()) throw InputError(where + ": at least one reward is needed");
  std::set<std::string> names;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (specs_[i].name.empty()) specs_[i].name = reward_type_name(specs_[i].type);
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

void RewardSet::finish() {
  for (const std::unique_ptr<RewardFunction>& f : functions_) f->finish();
}

}  // namespace sbp
