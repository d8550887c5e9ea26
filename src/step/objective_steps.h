#pragma once
// How each objective runs on the step runner (step_runner.h): its optimizer step over the
// step's micro-batches and its held-out loss. One row per objective, defined in the objective's
// own step file (sft_step.cpp, dpo_step.cpp, grpo_step.cpp, ppo_step.cpp) and registered with
// one line in objective_steps.cpp; what the rest of the program needs to know about it is its
// row in objective/objective_traits.h.
#include <span>

#include "objective/objective_traits.h"
#include "step/micro_batch.h"

namespace sbp {

class StepContext;
struct StepResult;

struct ObjectiveStep {
  ObjectiveKind kind;
  // Adds this rank's micro-batches' gradients and fills r.loss and r.metrics (whole-step values,
  // summed / merged over ranks). r.loss_tokens and r.tokens are set before the call.
  void (*run)(StepContext& ctx, const StepBatches& step, StepResult& r);
  // The held-out loss over `eval` (each rank every ranks-th micro-batch, sums added); nullptr:
  // the objective has none (StepRunner::evaluate returns NaN).
  double (*evaluate)(StepContext& ctx, std::span<const MicroBatch> eval);
};

const ObjectiveStep& objective_step(ObjectiveKind kind);

}  // namespace sbp
