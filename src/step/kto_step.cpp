// KTO on the step runner (step_runner.h): first, for every micro-batch and before any backward,
// the KL estimate's sums (the policy, no grad, and the reference on the micro-batch's mismatched
// pairs, kto_kl_batch); the step's KL is their mean over every sequence of the step, clamped at
// 0. Then per micro-batch the reference's log-probs and the policy's backward. The loss is the
// mean over the step's sequences; the held-out loss is the same over the held-out sequences,
// with the held-out set's KL.
#include <algorithm>

#include "objective/kto.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_runner.h"
#include "step/weighted_means.h"

namespace sbp {

namespace {

// Sum over the batch's KL pairs of (policy - reference) completion log-prob sums.
double kl_sum(StepRunner& runner, const Batch& b) {
  const Batch kl = kto_kl_batch(b);
  MicroBatchPrep prep(kl, runner.backend(), runner.pool());
  const std::vector<float> pol =
      runner.policy_engine().score(prep.for_model(*runner.models().policy.model.cfg)).logp;
  const std::vector<float> ref =
      runner.reference_engine().score(prep.for_model(runner.reference_config())).logp;  // (T)
  const std::vector<double> sp = completion_sums(kl, pol), sr = completion_sums(kl, ref);
  double sum = 0.0;
  for (size_t s = 0; s < sp.size(); ++s) sum += sp[s] - sr[s];
  return sum;
}

void run_kto(StepRunner& runner, const StepBatches& step, StepResult& r) {
  Communicator& comm = runner.comm();
  double kl[2] = {0.0, 0.0};  // sum of (policy - reference) over the KL pairs, sequences
  for (const MicroBatch& mb : step.micro) {
    kl[0] += kl_sum(runner, mb.batch);
    kl[1] += static_cast<double>(mb.batch.seq_lens.size());
  }
  comm.sum(kl);
  const double step_kl = kl[1] > 0.0 ? std::max(0.0, kl[0] / kl[1]) : 0.0;
  WeightedMeans stats;
  runner.for_each_slot(step, [&](size_t i, int64_t slot) {
    const MicroBatch& mb = step.micro[i];
    MicroBatchPrep prep(mb.batch, runner.backend(), runner.pool());
    const std::vector<float> ref =
        runner.reference_engine().score(prep.for_model(runner.reference_config())).logp;  // (T)
    KtoObjective objective(mb.batch, ref, mb.rewards, step_kl, runner.objective().kto, kl[1]);
    runner.backward_slot(runner.models().policy, prep, objective, slot, runner.logp_slot(r, i));
    r.loss += objective.loss();
    stats.add(objective.metrics(), static_cast<double>(mb.batch.seq_lens.size()));
  });
  r.loss = comm.sum(r.loss);
  stats.merge_ranks(comm);
  r.metrics = stats.means();
}

double evaluate_kto(StepRunner& runner, std::span<const MicroBatch> eval) {
  Communicator& comm = runner.comm();
  const KtoConfig& cfg = runner.objective().kto;
  double kl[2] = {0.0, 0.0};
  for (size_t i = static_cast<size_t>(comm.rank()); i < eval.size();
       i += static_cast<size_t>(comm.size())) {
    kl[0] += kl_sum(runner, eval[i].batch);
    kl[1] += static_cast<double>(eval[i].batch.seq_lens.size());
  }
  comm.sum(kl);
  const double eval_kl = kl[1] > 0.0 ? std::max(0.0, kl[0] / kl[1]) : 0.0;
  double sums[2] = {0.0, 0.0};  // loss, sequences
  for (size_t i = static_cast<size_t>(comm.rank()); i < eval.size();
       i += static_cast<size_t>(comm.size())) {
    const MicroBatch& mb = eval[i];
    MicroBatchPrep prep(mb.batch, runner.backend(), runner.pool());
    const std::vector<float> pol =
        runner.policy_engine().score(prep.for_model(*runner.models().policy.model.cfg)).logp;
    const std::vector<float> ref =
        runner.reference_engine().score(prep.for_model(runner.reference_config())).logp;
    // KtoObjective's formulas, forward only: its pre-pass on the whole batch as one block.
    KtoObjective objective(mb.batch, ref, mb.rewards, eval_kl, cfg, 1.0);
    TokenChunk all;
    all.logp = pol;
    objective.prepass(0, all);
    objective.finish_prepass(0);
    sums[0] += objective.loss();
    sums[1] += static_cast<double>(mb.batch.seq_lens.size());
  }
  comm.sum(sums);
  return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kKtoStep = {ObjectiveKind::kto, run_kto, evaluate_kto};

}  // namespace sbp
