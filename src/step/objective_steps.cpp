#include "step/objective_steps.h"

#include <iterator>

#include "core/error.h"

namespace sbp {

// The objectives' own rows, each defined in its step file (sft_step.cpp, dpo_step.cpp, ...).
extern const ObjectiveStep kSftStep, kDpoStep, kGrpoStep, kPpoStep, kOrpoStep, kKtoStep,
    kSimpoStep;

namespace {

// The registry: one entry per objective, in enum order (checked below).
const ObjectiveStep* const kSteps[] = {&kSftStep, &kDpoStep, &kGrpoStep, &kPpoStep,
                                       &kOrpoStep, &kKtoStep, &kSimpoStep};

}  // namespace

const ObjectiveStep& objective_step(ObjectiveKind kind) {
  const size_t i = static_cast<size_t>(kind);
  SBP_CHECK(std::size(kSteps) == all_objectives().size() && i < std::size(kSteps) &&
                kSteps[i]->kind == kind,
            "objective_step: the registry is not one row per objective in enum order");
  return *kSteps[i];
}

}  // namespace sbp
