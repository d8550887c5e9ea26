// SimPO on the step runner (step_runner.h): the policy alone (no reference pass), the pair loss
// a mean over the step's pairs and the CPO NLL (cpo_alpha) a mean over the step's chosen
// completion tokens; the held-out loss is the same over the held-out pairs.
#include <memory>

#include "objective/simpo.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

void run_simpo(StepContext& ctx, const StepBatches& step, StepResult& r) {
  double counts[2] = {0.0, 0.0};  // pairs, chosen completion tokens
  for (const MicroBatch& mb : step.micro) {
    counts[0] += static_cast<double>(mb.batch.seq_lens.size() / 2);
    counts[1] += simpo_chosen_tokens(mb.batch);
  }
  ctx.comm().sum(counts);
  // The objectives are kept to the step's end: the host sees the pre-pass's log-probs there,
  // with the step's one wait (head_route.h SequenceRoute).
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    MicroBatchPrep prep(b, ctx.backend(), ctx.pool());
    SimpoObjective& objective = ctx.keep(
        std::make_unique<SimpoObjective>(b, ctx.objective().simpo, counts[0], counts[1]),
        static_cast<double>(b.seq_lens.size() / 2));
    ctx.backward_slot(ctx.models().policy, prep, objective, slot, ctx.logp_slot(r, i));
  });
}

// The policy's log-probs, then SimpoObjective's formulas on the held-out pairs, forward only:
// one objective per held-out batch, normalised by the held-out set's pairs and chosen tokens.
double evaluate_simpo(StepContext& ctx, std::span<const MicroBatch> eval) {
  const std::vector<const MicroBatch*> share = ctx.eval_share(eval);
  double counts[2] = {0.0, 0.0};  // pairs, chosen completion tokens
  for (const MicroBatch* mb : share) {
    counts[0] += static_cast<double>(mb->batch.seq_lens.size() / 2);
    counts[1] += simpo_chosen_tokens(mb->batch);
  }
  ctx.comm().sum(counts);
  double loss = 0.0;
  for (const MicroBatch* mb : share) {
    SimpoObjective objective(mb->batch, ctx.objective().simpo, counts[0], counts[1]);
    const HostChunks host = host_chunks(objective.route());
    TokenChunk all;
    const std::vector<float> logp = ctx.score(mb->batch).logp;  // (T)
    all.logp = logp;
    host.prepass(0, all);
    host.finish_prepass(0);
    loss += objective.loss();
  }
  return counts[0] > 0.0 ? ctx.comm().sum(loss) : 0.0;
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kSimpoStep = {ObjectiveKind::simpo, run_simpo, evaluate_simpo};

}  // namespace sbp
