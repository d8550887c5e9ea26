#include "step/step_runner.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "step/objective_steps.h"

namespace sbp {

namespace {

// The per-sequence and per-token constants the objective reads, against the batch's shape.
void check_micro_batch(const ObjectiveSetup& s, const MicroBatch& mb, size_t i) {
  const std::string where = "micro-batch " + std::to_string(i) + ": ";
  const size_t S = mb.batch.seq_lens.size(), T = static_cast<size_t>(mb.batch.size());
  const ObjectiveTraits& t = s.traits();
  if (t.rollouts && mb.rewards.size() != S)
    throw InputError(where + std::to_string(mb.rewards.size()) + " rewards for " +
                     std::to_string(S) + " sequences");
  if (t.group == SequenceGroup::configured &&
      (mb.group_size < 1 || S % static_cast<size_t>(mb.group_size) != 0))
    throw InputError(where + std::to_string(S) + " sequences are not groups of " +
                     std::to_string(mb.group_size));
  if (!mb.old_logp.empty() && mb.old_logp.size() != T)
    throw InputError(where + std::to_string(mb.old_logp.size()) + " old log-probs for " +
                     std::to_string(T) + " rows");
  if (!mb.old_values.empty() && mb.old_values.size() != T)
    throw InputError(where + std::to_string(mb.old_values.size()) + " old values for " +
                     std::to_string(T) + " rows");
}

}  // namespace

StepBatches StepBatches::whole(std::vector<MicroBatch> micro) {
  StepBatches b;
  b.step_micro_batches = b.slots = static_cast<int64_t>(micro.size());
  for (int64_t i = 0; i < b.slots; ++i) b.index.push_back(i);
  b.micro = std::move(micro);
  return b;
}

StepRunner::StepRunner(const ObjectiveSetup& objective, const StepModels& models, Backend& be,
                       Pool& pool, const ExecConfig& exec, Communicator& comm,
                       StepRunnerOptions opts)
    : ctx_(objective, models, be, pool, exec, comm, opts) {}

Engine::TokenScores StepRunner::score(const Batch& batch) { return ctx_.score(batch); }

StepResult StepRunner::run(const StepBatches& step) {
  StepResult r = start(step);
  finish(r);
  return r;
}

void StepRunner::finish(StepResult& r) { ctx_.finish_step(r); }

StepResult StepRunner::start(const StepBatches& step) {
  ctx_.begin_step();
  const ObjectiveSetup& setup = ctx_.objective();
  const StepModels& models = ctx_.models();
  Communicator& comm = ctx_.comm();
  ctx_.check_trained();
  SBP_CHECK(step.micro.size() == step.index.size() &&
                static_cast<int64_t>(step.micro.size()) <= step.slots &&
                step.slots <= step.step_micro_batches,
            "StepRunner::run: inconsistent StepBatches");
  StepResult r;
  double loss_tokens = 0.0;
  for (size_t i = 0; i < step.micro.size(); ++i) {
    const MicroBatch& mb = step.micro[i];
    mb.batch.validate(models.policy.model.cfg->vocab_size, "micro-batch " + std::to_string(i));
    check_micro_batch(setup, mb, i);
    loss_tokens += mb.batch.loss_weight_sum();
    r.tokens += mb.batch.size();
  }
  r.loss_tokens = comm.sum(loss_tokens);
  r.tokens = comm.sum(r.tokens);
  if (ctx_.options().record_logp) r.logp.resize(step.micro.size());
  ctx_.zero_grads(step.slots);
  objective_step(setup.kind).run(ctx_, step, r);
  ctx_.reduce_lora_grads();
  return r;
}

double StepRunner::evaluate(std::span<const MicroBatch> eval) {
  const auto evaluate = objective_step(ctx_.objective().kind).evaluate;
  return evaluate ? evaluate(ctx_, eval) : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace sbp
