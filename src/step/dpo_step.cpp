// DPO on the step runner (step_runner.h): the reference's log-probs before the policy's
// backward of each micro-batch, the loss a mean over the step's pairs; the held-out loss is the
// mean pair loss.
#include <memory>
#include <utility>

#include "objective/dpo.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

void run_dpo(StepContext& ctx, const StepBatches& step, StepResult& r) {
  Communicator& comm = ctx.comm();
  double pairs = 0.0;
  for (const MicroBatch& mb : step.micro)
    pairs += static_cast<double>(mb.batch.seq_lens.size() / 2);
  pairs = comm.sum(pairs);
  // The objectives are kept to the step's end: the host sees the reference's and the pre-pass's
  // log-probs there, with the step's one wait (objective.h sequence_terms).
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    // One preparation shared by the reference's pass and the policy's.
    MicroBatchPrep prep(b, ctx.backend(), ctx.pool());
    Engine reference = ctx.reference_engine();
    Buffer ref_device;  // (T) the reference's log-probs, read on the device by the policy's pass
    ReferenceLogp ref =
        ctx.logp_at_next_wait(reference, prep.for_model(ctx.reference_config()), &ref_device);
    DpoObjective& objective =
        ctx.keep(std::make_unique<DpoObjective>(b, std::move(ref), ctx.objective().dpo, pairs),
                   static_cast<double>(b.seq_lens.size() / 2));
    ctx.backward_slot(ctx.models().policy, prep, objective, slot, ctx.logp_slot(r, i));
  });
}

// Per-sequence sums of the policy's and the reference's log-probs over the completions, then
// the pair loss: DpoObjective's formulas, forward only.
double evaluate_dpo(StepContext& ctx, std::span<const MicroBatch> eval) {
  Communicator& comm = ctx.comm();
  const DpoConfig& cfg = ctx.objective().dpo;
  const bool ipo = cfg.loss_type == DpoLoss::ipo;
  double sums[2] = {0.0, 0.0};  // loss, pairs
  for (const MicroBatch* mb : ctx.eval_share(eval)) {
    const Batch& b = mb->batch;
    MicroBatchPrep prep(b, ctx.backend(), ctx.pool());  // shared by the policy and reference
    const std::vector<float> pol =
        ctx.policy_engine().score(prep.for_model(*ctx.models().policy.model.cfg)).logp;
    const std::vector<float> ref =
        ctx.reference_engine().score(prep.for_model(ctx.reference_config())).logp;
    const SequenceRows rows(b);
    std::vector<double> sp(b.seq_lens.size(), 0.0), sr(sp.size(), 0.0);
    for (int64_t t = 0; t < rows.num_rows(); ++t) {
      const size_t s = static_cast<size_t>(rows.segment[static_cast<size_t>(t)]);
      sp[s] +=
          static_cast<double>(rows.weight[static_cast<size_t>(t)]) * pol[static_cast<size_t>(t)];
      sr[s] +=
          static_cast<double>(rows.weight[static_cast<size_t>(t)]) * ref[static_cast<size_t>(t)];
    }
    for (size_t q = 0; q + 1 < sp.size(); q += 2) {
      const double nc = ipo ? rows.weight_sum[q] : 1.0, nr = ipo ? rows.weight_sum[q + 1] : 1.0;
      const double z = (sp[q] / nc - sp[q + 1] / nr) - (sr[q] / nc - sr[q + 1] / nr);
      sums[0] += dpo_pair_loss(z, cfg.loss_type, cfg.beta, cfg.label_smoothing).value;
      sums[1] += 1.0;
    }
  }
  comm.sum(sums);
  return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kDpoStep = {ObjectiveKind::dpo, run_dpo, evaluate_dpo};

}  // namespace sbp
