#pragma once
// What an optimizer step optimises, typed: the objective's kind and every setting of it, parsed
// once where a config file or a command line is read (train/train_config.h, src/cli/). The step
// runner (step/step_runner.h) builds each micro-batch's objective from it, filling in what only
// the step knows (its micro-batch count, its completion tokens, its pairs).
//
//   sft   SftObjective
//   dpo   DpoObjective, against a reference model
//   grpo  GrpoObjective, against a reference model when beta != 0
//   ppo   PpoPolicyObjective on the policy and PpoValueObjective on a value model, rollout
//         constants (GAE) against a reference model
#include <string>

#include "core/enum_names.h"
#include "objective/dpo.h"
#include "objective/gae.h"
#include "objective/group_advantages.h"
#include "objective/grpo.h"
#include "objective/ppo.h"

namespace sbp {

enum class ObjectiveKind { sft, dpo, grpo, ppo };
inline constexpr EnumName<ObjectiveKind> kObjectiveNames[] = {{ObjectiveKind::sft, "sft"},
                                                              {ObjectiveKind::dpo, "dpo"},
                                                              {ObjectiveKind::grpo, "grpo"},
                                                              {ObjectiveKind::ppo, "ppo"}};
ObjectiveKind parse_objective(const std::string& name);  // InputError naming the choices
const char* objective_name(ObjectiveKind k);

struct ObjectiveSetup {
  ObjectiveKind kind = ObjectiveKind::sft;
  DpoConfig dpo;
  // grad_accum_steps and num_items_in_batch are the step's: the runner sets them.
  GrpoConfig grpo;
  ScaleRewards scale_rewards = ScaleRewards::group;
  // grad_accum_steps is the step's: the runner sets it.
  PpoConfig ppo;
  PpoRolloutConfig rollout;

  // DPO and PPO always score against a reference model (PPO's KL penalty is part of its
  // per-token rewards and objective/kl is logged even when kl_coef is 0); GRPO only with a KL
  // term.
  bool needs_reference() const;
  bool needs_value_model() const { return kind == ObjectiveKind::ppo; }
  std::string describe() const;  // "dpo (sigmoid, beta 0.1, label smoothing 0)"
};

}  // namespace sbp
