#include "objective/objective_setup.h"

#include <cstdio>

namespace sbp {

ObjectiveKind parse_objective(const std::string& name) {
  return parse_enum<ObjectiveKind>(kObjectiveNames, name, "objective");
}

const char* objective_name(ObjectiveKind k) { return enum_name<ObjectiveKind>(kObjectiveNames, k); }

bool ObjectiveSetup::needs_reference() const {
  return kind == ObjectiveKind::dpo || kind == ObjectiveKind::ppo ||
         (kind == ObjectiveKind::grpo && grpo.beta != 0.0);
}

std::string ObjectiveSetup::describe() const {
  char buf[200];
  switch (kind) {
    case ObjectiveKind::sft: return "sft";
    case ObjectiveKind::dpo:
      std::snprintf(buf, sizeof buf, "dpo (%s, beta %g, label smoothing %g)",
                    dpo_loss_name(dpo.loss_type), dpo.beta, dpo.label_smoothing);
      return buf;
    case ObjectiveKind::grpo:
      std::snprintf(buf, sizeof buf, "grpo (%s, beta %g, scale_rewards %s)",
                    grpo_loss_name(grpo.loss_type), grpo.beta, scale_rewards_name(scale_rewards));
      return buf;
    case ObjectiveKind::ppo:
      std::snprintf(buf, sizeof buf, "ppo (kl_coef %g, vf_coef %g)", rollout.kl_coef, ppo.vf_coef);
      return buf;
  }
  return "?";
}

}  // namespace sbp
