// SFT on the step runner (step_runner.h): one SftObjective per micro-batch, normalised by the
// step's loss tokens; the held-out loss is the token-weighted NLL.
#include <memory>
#include <vector>

#include "objective/sft.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

void run_sft(StepRunner& runner, const StepBatches& step, StepResult& r) {
  // The objectives live to the step's end: their losses add the log-probs that the engine reads
  // there (grads_without_logp), after the step's one wait (StepRunner::finish).
  auto objectives = std::make_shared<std::vector<std::unique_ptr<SftObjective>>>();
  runner.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    // normalised by the loss tokens of the whole step
    SftObjective& objective =
        *objectives->emplace_back(std::make_unique<SftObjective>(b, r.loss_tokens));
    MicroBatchPrep prep(b, runner.backend(), runner.pool());
    runner.backward_slot(runner.models().policy, prep, objective, slot, runner.logp_slot(r, i));
  });
  runner.at_finish([objectives, &comm = runner.comm()](StepResult& result) {
    for (const auto& objective : *objectives) result.loss += objective->loss();
    result.loss = comm.sum(result.loss);
  });
}

double evaluate_sft(StepRunner& runner, std::span<const MicroBatch> eval) {
  Communicator& comm = runner.comm();
  double sums[2] = {0.0, 0.0};  // NLL, loss weight
  for (size_t i = static_cast<size_t>(comm.rank()); i < eval.size();
       i += static_cast<size_t>(comm.size())) {
    const Batch& b = eval[i].batch;
    const std::vector<float> logp = runner.score(b).logp;
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
