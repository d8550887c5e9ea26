// StepRunner's PPO step (step_runner.h): the rollout constants of every micro-batch before any
// backward, GAE whitened over the step, then the policy's and the value model's updates.
#include <memory>

#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_runner.h"
#include "step/weighted_means.h"

namespace sbp {

namespace {

void run_ppo(StepRunner& runner, const StepBatches& step, StepResult& r) {
  Communicator& comm = runner.comm();
  // The rollout constants of every micro-batch, before any backward: the weights they are
  // computed from are the ones the step starts with.
  struct Rollout {
    std::vector<float> old_logp, ref_logp, old_values;  // (T)
  };
  std::vector<Rollout> rollouts(step.micro.size());
  std::vector<PpoRolloutPart> parts;
  // Each micro-batch prepared once for its (up to) five passes: these three and the two
  // updates below. Its tables stay until its updates are done.
  std::vector<MicroBatchPrep> preps;
  preps.reserve(step.micro.size());
  const ModelConfig& policy_cfg = *runner.models().policy.model.cfg;
  const ModelConfig& value_cfg = *runner.models().value.model.cfg;
  // Every micro-batch's forwards leave their numbers on the device and come back together,
  // with one wait: the advantages need all of them (whitened over the step, every rank's).
  struct Pending {
    std::shared_ptr<const std::vector<float>> old_logp, ref_logp, old_values;  // (T) or null
  };
  std::vector<Pending> pending(step.micro.size());
  for (size_t i = 0; i < step.micro.size(); ++i) {
    const MicroBatch& mb = step.micro[i];
    MicroBatchPrep& prep = preps.emplace_back(mb.batch, runner.backend(), runner.pool());
    Engine policy = runner.policy_engine(), reference = runner.reference_engine();
    if (mb.old_logp.empty())
      pending[i].old_logp = runner.logp_at_next_wait(policy, prep.for_model(policy_cfg)).host;
    pending[i].ref_logp =
        runner.logp_at_next_wait(reference, prep.for_model(runner.reference_config())).host;
    if (mb.old_values.empty()) {
      Engine value = runner.value_engine();
      pending[i].old_values = runner.values_at_next_wait(value, prep.for_model(value_cfg));
    }
  }
  runner.backend().finish_reads();  // the rollout's one wait
  for (size_t i = 0; i < step.micro.size(); ++i) {
    const MicroBatch& mb = step.micro[i];
    Rollout& ro = rollouts[i];
    ro.old_logp = pending[i].old_logp ? *pending[i].old_logp : mb.old_logp;
    ro.ref_logp = *pending[i].ref_logp;
    ro.old_values = pending[i].old_values ? *pending[i].old_values : mb.old_values;
    parts.push_back({&mb.batch, mb.rewards, ro.old_logp, ro.ref_logp, ro.old_values});
  }
  // Whitening over the whole step: its statistics are summed over the ranks.
  SumOverRanks sum_over_ranks;
  if (comm.size() > 1) sum_over_ranks = [&comm](std::span<double> x) { comm.sum(x); };
  const std::vector<PpoAdvantages> adv =
      ppo_step_advantages(parts, runner.objective().rollout, sum_over_ranks);

  // One update per micro-batch; each term is already divided by ga, so the losses add up to the
  // mean over micro-batches of TRL's pg_loss + vf_coef * vf_loss.
  PpoConfig cfg = runner.objective().ppo;
  cfg.grad_accum_steps = step.step_micro_batches;
  // The policy objectives live to the step's end: their losses and statistics add the
  // log-probs that the engine reads there (objective.h policy_terms), after the step's wait.
  struct Kept {
    std::unique_ptr<PpoPolicyObjective> policy;
    std::unique_ptr<PpoValueObjective> value;
  };
  auto kept = std::make_shared<std::vector<Kept>>();
  auto rollout = std::make_shared<WeightedMeans>();  // rollout statistics over the sequences
  runner.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    Kept& k = kept->emplace_back();
    k.policy =
        std::make_unique<PpoPolicyObjective>(b, adv[i].advantages, rollouts[i].old_logp, cfg);
    runner.backward_slot(runner.models().policy, preps[i], *k.policy, slot, runner.logp_slot(r, i));
    k.value = std::make_unique<PpoValueObjective>(b, adv[i].returns, rollouts[i].old_values, cfg);
    runner.backward_slot(runner.models().value, preps[i], *k.value, slot, nullptr);
    preps[i].release();  // its passes are done
    rollout->add({{"objective/kl", adv[i].mean_kl},
                  {"objective/non_score_reward", adv[i].mean_non_score_reward},
                  {"objective/scores", adv[i].mean_score},
                  {"objective/rlhf_reward", adv[i].mean_non_score_reward + adv[i].mean_score}},
                 static_cast<double>(b.seq_lens.size()));
  });
  runner.at_finish([kept, rollout, &comm](StepResult& result) {
    WeightedMeans stats;  // TRL logs the mean of its per-micro-batch statistics
    for (const Kept& k : *kept) {
      result.loss += k.policy->loss() + k.value->loss();
      std::map<std::string, double> m = k.policy->metrics();
      for (const auto& [name, v] : k.value->metrics()) m[name] = v;
      stats.add(m, 1.0);
    }
    result.loss = comm.sum(result.loss);
    stats.merge_ranks(comm);
    rollout->merge_ranks(comm);
    result.metrics = stats.means();
    for (const auto& [name, v] : rollout->means()) result.metrics[name] = v;
    result.metrics["reward"] = result.metrics["objective/scores"];
  });
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kPpoStep = {ObjectiveKind::ppo, run_ppo, nullptr};

}  // namespace sbp
