#include "cli/objective_args.h"

#include <cmath>
#include <cstdio>

#include "cli/flag_checks.h"
#include "core/error.h"

namespace sbp::cli {

namespace {

// Loss coefficients (beta, entropy) beyond this swamp the loss they are added to: a typo.
constexpr double kMaxCoefficient = 1e4;

// Re-throws a parse error with the flag it came from.
template <class F>
auto flag(const char* name, F parse) {
  try {
    return parse();
  } catch (const InputError& e) {
    throw InputError(std::string(name) + ": " + e.what());
  }
}

// What --beta sets, from the rows that it names (objective/objective_settings.h): "dpo.beta,
// grpo.beta, ... (default 0.1, 0.04, ...)".
std::string beta_help() {
  std::string keys, defaults;
  for (const ObjectiveTraits* t : all_objectives()) {
    for (const ObjectiveSetting& row : t->settings) {
      if (!row.beta_flag) continue;
      ObjectiveSetup s;
      char value[32];
      std::snprintf(value, sizeof value, "%g", row.beta_flag_default.value_or(row.number(s)));
      keys += (keys.empty() ? "" : ", ") + std::string(row.key);
      defaults += (defaults.empty() ? "" : ", ") + std::string(value);
    }
  }
  return "the objective's coefficient: " + keys + " (default " + defaults + ")";
}

}  // namespace

void ObjectiveArgs::add_flags(CLI::App* c) {
  c->add_option("--objective", objective, enum_choices(objective_names()));
  c->add_option("--dpo-loss", dpo_loss, "DPO loss: sigmoid, hinge or ipo");
  // Every number is checked for range and finiteness here, where it is parsed: a NaN fails
  // every comparison, so a later `beta >= 0` would have taken it for "not given".
  c->add_option("--label-smoothing", label_smoothing, "DPO label smoothing")
      ->check(finite_in(0.0, 0.4999));
  c->add_option("--grpo-loss", grpo_loss, "GRPO loss_type: grpo, bnpo, dr_grpo, dapo");
  c->add_option("--scale-rewards", scale_rewards, "GRPO: group, batch or none");
  c->add_option("--beta", beta, beta_help())->check(finite_in(0.0, kMaxCoefficient));
  c->add_option("--group-size", group_size, "GRPO completions per prompt");
  c->add_option("--entropy-coef", entropy_coef, "GRPO/PPO entropy bonus")
      ->check(finite_in(0.0, kMaxCoefficient));
}

ObjectiveSetup ObjectiveArgs::setup() const {
  ObjectiveSetup s;
  s.kind = flag("--objective", [&] { return parse_objective(objective); });
  s.dpo.loss_type = flag("--dpo-loss", [&] { return parse_dpo_loss(dpo_loss); });
  s.dpo.label_smoothing = label_smoothing;
  s.grpo.loss_type = flag("--grpo-loss", [&] { return parse_grpo_loss(grpo_loss); });
  s.scale_rewards = flag("--scale-rewards", [&] { return parse_scale_rewards(scale_rewards); });
  // A group of one has no spread to compare with: its advantage is 0/0 under group scaling.
  if (group_size < 2)
    throw InputError("--group-size must be >= 2 (GRPO compares the completions of one prompt)");
  if (!(label_smoothing >= 0.0 && label_smoothing < 0.5))
    throw InputError("--label-smoothing must be in [0, 0.5)");
  // The flags' own checks cover the command line; these cover a caller that set the fields.
  if (!std::isfinite(entropy_coef) || entropy_coef < 0.0)
    throw InputError("--entropy-coef must be a finite number >= 0");
  if (!std::isfinite(beta)) throw InputError("--beta must be a finite number >= 0");
  s.grpo.entropy_coef = entropy_coef;
  s.ppo.entropy_coef = entropy_coef;
  for (const ObjectiveSetting& row : s.traits().settings) {
    if (!row.beta_flag) continue;
    if (beta >= 0.0)
      row.number(s) = beta;
    else if (row.beta_flag_default)
      row.number(s) = *row.beta_flag_default;
  }
  if (const char* error = s.traits().settings_error ? s.traits().settings_error(s) : nullptr)
    throw InputError(std::string("--") + error + " for " + s.traits().name);
  return s;
}

std::string ObjectiveArgs::describe() const {
  const ObjectiveSetup s = setup();
  std::string d = s.describe();
  if (s.traits().group == SequenceGroup::configured)
    d += ", group " + std::to_string(group_size);
  return d;
}

}  // namespace sbp::cli
