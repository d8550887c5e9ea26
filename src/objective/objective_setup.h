#pragma once
// What an optimizer step optimises, typed: the objective's kind and every setting of it, parsed
// once where a config file or a command line is read (train/train_config.h, src/cli/) through
// the setting rows each objective declares in its own file (objective_settings.h). The step
// runner (step/step_runner.h) builds each micro-batch's objective from it, filling in what only
// the step knows (its micro-batch count, its completion tokens, its pairs). A new objective with
// settings adds its config struct here: its header and one member.
//
//   sft   SftObjective
//   dpo   DpoObjective, against a reference model
//   grpo  GrpoObjective, against a reference model when beta != 0
//   orpo  OrpoObjective, the policy alone
//   kto   KtoObjective, against a reference model, with a KL estimate from mismatched pairs
//   simpo SimpoObjective, the policy alone
//   ppo   PpoPolicyObjective on the policy and PpoValueObjective on a value model, rollout
//         constants (GAE) against a reference model
#include <string>

#include "objective/dpo.h"
#include "objective/gae.h"
#include "objective/group_advantages.h"
#include "objective/grpo.h"
#include "objective/kto.h"
#include "objective/objective_traits.h"
#include "objective/orpo.h"
#include "objective/ppo.h"
#include "objective/simpo.h"

namespace sbp {

struct ObjectiveSetup {
  ObjectiveKind kind = ObjectiveKind::sft;
  DpoConfig dpo;
  // grad_accum_steps and num_items_in_batch are the step's: the runner sets them.
  GrpoConfig grpo;
  ScaleRewards scale_rewards = ScaleRewards::group;
  // grad_accum_steps is the step's: the runner sets it.
  PpoConfig ppo;
  PpoRolloutConfig rollout;
  OrpoConfig orpo;
  KtoConfig kto;
  SimpoConfig simpo;

  // The objective's row (objective_traits.h).
  const ObjectiveTraits& traits() const { return objective_traits(kind); }
  bool needs_reference() const { return traits().needs_reference(*this); }
  bool needs_value_model() const { return traits().value_model; }
  std::string describe() const { return traits().describe(*this); }  // "dpo (sigmoid, ...)"
};

}  // namespace sbp
