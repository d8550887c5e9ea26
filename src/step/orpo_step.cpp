// ORPO on the step runner (step_runner.h): the policy alone (no reference pass), the NLL a mean
// over the step's chosen rows and the odds term a mean over the step's pairs; the held-out loss
// is the same over the held-out pairs.
#include <cmath>
#include <memory>

#include "objective/orpo.h"
#include "objective/token_terms.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

void run_orpo(StepContext& ctx, const StepBatches& step, StepResult& r) {
  Communicator& comm = ctx.comm();
  double counts[2] = {0.0, 0.0};  // pairs, NLL rows
  for (const MicroBatch& mb : step.micro) {
    counts[0] += static_cast<double>(mb.batch.seq_lens.size() / 2);
    counts[1] += orpo_nll_rows(mb.batch);
  }
  comm.sum(counts);
  // The objectives are kept to the step's end: the host sees the pre-pass's log-probs there,
  // with the step's one wait (objective.h sequence_terms).
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    MicroBatchPrep prep(b, ctx.backend(), ctx.pool());
    OrpoObjective& objective = ctx.keep(
        std::make_unique<OrpoObjective>(b, ctx.objective().orpo, counts[0], counts[1]),
        static_cast<double>(b.seq_lens.size() / 2));
    ctx.backward_slot(ctx.models().policy, prep, objective, slot, ctx.logp_slot(r, i));
  });
}

// The policy's log-probs, then OrpoObjective's formulas, forward only: the chosen rows' NLL
// over all held-out chosen rows plus the mean odds term over all held-out pairs.
double evaluate_orpo(StepContext& ctx, std::span<const MicroBatch> eval) {
  Communicator& comm = ctx.comm();
  const double beta = ctx.objective().orpo.beta;
  double sums[4] = {0.0, 0.0, 0.0, 0.0};  // NLL, NLL rows, -log sigmoid(z), pairs
  for (const MicroBatch* mb : ctx.eval_share(eval)) {
    const Batch& b = mb->batch;
    const std::vector<float> logp = ctx.score(b).logp;  // (T)
    const SequenceRows rows(b);
    std::vector<double> sum(b.seq_lens.size(), 0.0);
    for (int64_t t = 0; t < rows.num_rows(); ++t) {
      const size_t u = static_cast<size_t>(t);
      const size_t s = static_cast<size_t>(rows.segment[u]);
      sum[s] += static_cast<double>(rows.weight[u]) * logp[u];
      if (s % 2 == 0) sums[0] -= logp[u];  // a segment's last row has logp 0
    }
    sums[1] += orpo_nll_rows(b);
    for (size_t q = 0; q + 1 < sum.size(); q += 2) {
      const OrpoLogOdds o =
          orpo_log_odds(sum[q] / rows.weight_sum[q], sum[q + 1] / rows.weight_sum[q + 1]);
      sums[2] -= log_sigmoid(o.z);
      sums[3] += 1.0;
    }
  }
  comm.sum(sums);
  if (sums[3] == 0.0) return 0.0;
  return sums[0] / sums[1] + beta * sums[2] / sums[3];
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kOrpoStep = {ObjectiveKind::orpo, run_orpo, evaluate_orpo};

}  // namespace sbp
