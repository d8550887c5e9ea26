// SFT on the step runner (step_runner.h): one SftObjective per micro-batch, normalised by the
// step's loss tokens; the held-out loss is the token-weighted NLL.
#include <memory>
#include <vector>

#include "objective/sft.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

void run_sft(StepContext& ctx, const StepBatches& step, StepResult& r) {
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    // Normalised by the loss tokens of the whole step. Kept to the step's end: its loss adds the
    // log-probs that the engine reads there (step_context.h). SFT logs no statistics but its loss.
    SftObjective& objective =
        ctx.keep(std::make_unique<SftObjective>(b, r.loss_tokens), b.loss_weight_sum());
    MicroBatchPrep prep(b, ctx.backend(), ctx.pool());
    ctx.backward_slot(ctx.models().policy, prep, objective, slot, ctx.logp_slot(r, i));
  });
}

double evaluate_sft(StepContext& ctx, std::span<const MicroBatch> eval) {
  Communicator& comm = ctx.comm();
  double sums[2] = {0.0, 0.0};  // NLL, loss weight
  for (const MicroBatch* mb : ctx.eval_share(eval)) {
    const Batch& b = mb->batch;
    const std::vector<float> logp = ctx.score(b).logp;
    const std::vector<float> w = b.target_weights();
    for (size_t t = 0; t < w.size(); ++t) {
      sums[0] -= static_cast<double>(w[t]) * static_cast<double>(logp[t]);
      sums[1] += w[t];
    }
  }
  comm.sum(sums);
  return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kSftStep = {ObjectiveKind::sft, run_sft, evaluate_sft};

}  // namespace sbp
