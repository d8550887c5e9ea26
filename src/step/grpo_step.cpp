// StepRunner's GRPO step (step_runner.h): advantages over the step's groups, then one
// GrpoObjective per micro-batch.
#include <memory>
#include <utility>

#include "core/error.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"

namespace sbp {

namespace {

// GRPO's rewards of every micro-batch of the step, in step order, gathered from every rank.
struct StepRewards {
  std::vector<float> all;     // the step's rewards, micro-batch by micro-batch
  std::vector<size_t> begin;  // (step micro-batches) where each micro-batch's rewards start
  int64_t group = 0;          // completions per prompt
};

StepRewards gather_rewards(const StepBatches& step, Communicator& comm) {
  StepRewards out;
  if (comm.size() == 1) {
    for (const MicroBatch& mb : step.micro) {
      out.begin.push_back(out.all.size());
      out.all.insert(out.all.end(), mb.rewards.begin(), mb.rewards.end());
      if (out.group == 0) out.group = mb.group_size;
    }
    return out;
  }
  // Per local micro-batch: [step index, group size, n, n rewards].
  std::vector<double> mine;
  for (size_t k = 0; k < step.micro.size(); ++k) {
    const MicroBatch& mb = step.micro[k];
    mine.push_back(static_cast<double>(step.index[k]));
    mine.push_back(static_cast<double>(mb.group_size));
    mine.push_back(static_cast<double>(mb.rewards.size()));
    mine.insert(mine.end(), mb.rewards.begin(), mb.rewards.end());
  }
  std::vector<std::vector<float>> by_index(static_cast<size_t>(step.step_micro_batches));
  std::vector<int64_t> groups(by_index.size(), 0);
  for (const std::vector<double>& from : comm.allgather(mine)) {
    for (size_t at = 0; at < from.size();) {
      const size_t index = static_cast<size_t>(from[at]), n = static_cast<size_t>(from[at + 2]);
      groups[index] = static_cast<int64_t>(from[at + 1]);
      for (size_t j = 0; j < n; ++j)
        by_index[index].push_back(static_cast<float>(from[at + 3 + j]));
      at += 3 + n;
    }
  }
  for (size_t i = 0; i < by_index.size(); ++i) {
    out.begin.push_back(out.all.size());
    out.all.insert(out.all.end(), by_index[i].begin(), by_index[i].end());
    if (out.group == 0) out.group = groups[i];
  }
  return out;
}

void run_grpo(StepContext& ctx, const StepBatches& step, StepResult& r) {
  Communicator& comm = ctx.comm();
  // Advantages over the step's groups, which sit as consecutive segments in order.
  const StepRewards rewards = gather_rewards(step, comm);
  for (const MicroBatch& mb : step.micro)
    if (mb.group_size != rewards.group)
      throw InputError("grpo: the step's micro-batches have groups of " +
                       std::to_string(rewards.group) + " and " + std::to_string(mb.group_size) +
                       " completions (every group must have the same size)");
  const std::vector<float> advantages =
      group_advantages(rewards.all, rewards.group, ctx.objective().scale_rewards);
  GrpoConfig cfg = ctx.objective().grpo;
  cfg.grad_accum_steps = step.step_micro_batches;
  cfg.num_items_in_batch = r.loss_tokens;  // completion tokens of the whole step
  // The objectives are kept to the step's end: their losses and statistics add the log-probs
  // that the engine reads there (objective.h policy_terms), after the step's one wait.
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const MicroBatch& mb = step.micro[i];
    const size_t at = rewards.begin[static_cast<size_t>(step.index[i])];
    const std::span<const float> adv(advantages.data() + at, mb.batch.seq_lens.size());  // (S)
    // One preparation shared by the reference's pass and the policy's.
    MicroBatchPrep prep(mb.batch, ctx.backend(), ctx.pool());
    // With a KL term, the reference's log-probs: read on the device by the policy's formula,
    // by the host with the step's wait.
    Buffer ref_device;  // (T)
    ReferenceLogp ref;
    if (cfg.beta != 0.0) {
      Engine reference = ctx.reference_engine();
      ref = ctx.logp_at_next_wait(reference, prep.for_model(ctx.reference_config()),
                                     &ref_device);
    }
    GrpoObjective& objective =
        ctx.keep(std::make_unique<GrpoObjective>(mb.batch, adv, cfg, mb.old_logp, std::move(ref)),
                   mb.batch.loss_weight_sum());
    ctx.backward_slot(ctx.models().policy, prep, objective, slot, ctx.logp_slot(r, i));
  });
  double reward = 0.0;
  for (float x : rewards.all) reward += x / static_cast<double>(rewards.all.size());
  ctx.at_finish([reward](StepResult& result) { result.metrics["reward"] = reward; });
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kGrpoStep = {ObjectiveKind::grpo, run_grpo, nullptr};

}  // namespace sbp
