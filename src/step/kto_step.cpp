// KTO on the step runner (step_runner.h): first, for every micro-batch and before any backward,
// the KL estimate's sums (the policy, no grad, and the reference on the micro-batch's mismatched
// pairs, kto_kl_batch); the step's KL is their mean over every sequence of the step, clamped at
// 0. Then per micro-batch the reference's log-probs and the policy's backward. The loss is the
// mean over the step's sequences; the held-out loss is the same over the held-out sequences,
// with the held-out set's KL.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "objective/kto.h"
#include "step/kept_objectives.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

// Per batch, the sum over its KL pairs of (policy - reference) completion log-prob sums. Every
// batch's two forwards are queued first and their log-probs come back with one wait.
std::vector<double> kl_sums(StepRunner& runner, const std::vector<const Batch*>& batches) {
  struct Scored {
    Batch kl;
    ReferenceLogp policy, reference;  // (T) each, on the host after the wait
  };
  std::vector<Scored> scored;
  for (const Batch* b : batches) {
    Scored& s = scored.emplace_back();
    s.kl = kto_kl_batch(*b);
    MicroBatchPrep prep(s.kl, runner.backend(), runner.pool());
    Engine policy = runner.policy_engine(), reference = runner.reference_engine();
    s.policy = runner.logp_at_next_wait(policy, prep.for_model(*runner.models().policy.model.cfg));
    s.reference = runner.logp_at_next_wait(reference, prep.for_model(runner.reference_config()));
  }
  runner.backend().finish_reads();  // the one wait
  std::vector<double> out;
  for (const Scored& s : scored) {
    const std::vector<double> sp = completion_sums(s.kl, *s.policy.host);
    const std::vector<double> sr = completion_sums(s.kl, *s.reference.host);
    double sum = 0.0;
    for (size_t k = 0; k < sp.size(); ++k) sum += sp[k] - sr[k];
    out.push_back(sum);
  }
  return out;
}

void run_kto(StepRunner& runner, const StepBatches& step, StepResult& r) {
  Communicator& comm = runner.comm();
  double kl[2] = {0.0, 0.0};  // sum of (policy - reference) over the KL pairs, sequences
  std::vector<const Batch*> batches;
  for (const MicroBatch& mb : step.micro) batches.push_back(&mb.batch);
  const std::vector<double> sums = kl_sums(runner, batches);
  for (size_t i = 0; i < sums.size(); ++i) {
    kl[0] += sums[i];
    kl[1] += static_cast<double>(step.micro[i].batch.seq_lens.size());
  }
  comm.sum(kl);
  const double step_kl = kl[1] > 0.0 ? std::max(0.0, kl[0] / kl[1]) : 0.0;
  // The objectives live to the step's end: the host sees the reference's and the pre-pass's
  // log-probs there, with the step's one wait (objective.h sequence_terms).
  auto kept = std::make_shared<KeptObjectives>();
  runner.for_each_slot(step, [&](size_t i, int64_t slot) {
    const MicroBatch& mb = step.micro[i];
    MicroBatchPrep prep(mb.batch, runner.backend(), runner.pool());
    Engine reference = runner.reference_engine();
    Buffer ref_device;  // (T) the reference's log-probs, read on the device by the policy's pass
    ReferenceLogp ref =
        runner.logp_at_next_wait(reference, prep.for_model(runner.reference_config()), &ref_device);
    KtoObjective& objective =
        kept->keep(std::make_unique<KtoObjective>(mb.batch, std::move(ref), mb.rewards, step_kl,
                                                  runner.objective().kto, kl[1]),
                   static_cast<double>(mb.batch.seq_lens.size()));
    runner.backward_slot(runner.models().policy, prep, objective, slot, runner.logp_slot(r, i));
  });
  runner.at_finish([kept, &comm](StepResult& result) { kept->complete(result, comm); });
}

double evaluate_kto(StepRunner& runner, std::span<const MicroBatch> eval) {
  Communicator& comm = runner.comm();
  const KtoConfig& cfg = runner.objective().kto;
  double kl[2] = {0.0, 0.0};
  std::vector<const Batch*> mine;  // this rank's held-out batches
  for (size_t i = static_cast<size_t>(comm.rank()); i < eval.size();
       i += static_cast<size_t>(comm.size()))
    mine.push_back(&eval[i].batch);
  const std::vector<double> kl_of = kl_sums(runner, mine);
  for (size_t k = 0; k < mine.size(); ++k) {
    kl[0] += kl_of[k];
    kl[1] += static_cast<double>(mine[k]->seq_lens.size());
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
