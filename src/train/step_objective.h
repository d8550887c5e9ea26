#pragma once
// The objective side of one optimizer step: builds each micro-batch's objective with the
// normalisers of the WHOLE step (so gradient accumulation equals one big batch), runs the
// engine's forward_backward on it, and gathers the loss and the objective's statistics.
//
//   sft   SftObjective; N = trained tokens of the step
//   dpo   DpoObjective; each micro-batch holds whole (chosen, rejected) pairs as consecutive
//         segments; reference log-probs from a forward of the reference model; the loss is the
//         mean over the step's pairs
//   grpo  GrpoObjective; advantages from the rewards of the step's groups (TRL's formula, every
//         group the same size); old log-probs = the current policy's, detached (one update per
//         batch of offline rollouts); reference log-probs only when beta > 0; dapo's
//         num_items_in_batch = completion tokens of the step, ga = micro-batches of the step
//   ppo   offline rollouts, one PPO update per batch (TRL with num_ppo_epochs = 1): first, for
//         every micro-batch and before any backward, the rollout constants — old log-probs =
//         the current policy's (Engine::score, detached), reference log-probs, old values
//         (the value model's Engine::values), scores = the records' rewards — and from them
//         per-token rewards, GAE advantages and returns (gae.h ppo_step_advantages: whitened
//         over the whole step, as TRL whitens its whole batch); then per micro-batch
//         PpoPolicyObjective on the policy and PpoValueObjective on the value model, both with
//         ga = micro-batches of the step. The value model's gradient goes into its own grads.
//
// Data parallelism (docs/DISTRIBUTED.md): each rank runs its share of the step's micro-batches
// (StepPart) and every step-wide quantity is computed over all ranks before the first
// backward: the SFT token count and the DPO pair count are summed, GRPO's rewards are gathered
// in step order (so the advantages are those of the whole step), PPO's whitening statistics
// are summed, and dapo's num_items_in_batch and every ga are the step's. Losses and statistics
// are summed / merged over ranks for the log. Every rank runs the same number of micro-batch
// slots, an empty last one where it has no micro-batch, so that the ranks' collectives match.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/packing.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "engine/engine.h"
#include "engine/reference_model.h"
#include "objective/gae.h"
#include "objective/ppo.h"
#include "train/ppo_value_model.h"
#include "train/train_config.h"

namespace sbp {

// This rank's share of one optimizer step: micro-batch i of the step goes to rank i % ranks,
// and every rank runs `slots` = ceil(step_micro_batches / ranks) slots (data_parallel.h).
struct StepPart {
  std::vector<PackedBatch> batches;  // this rank's micro-batches, in step order
  std::vector<int64_t> index;        // the position of each among the step's micro-batches
  int64_t step_micro_batches = 0;    // of the whole step, every rank
  int64_t slots = 0;
};
// The whole step on one process.
StepPart whole_step(std::vector<PackedBatch> batches);

class StepObjective {
 public:
  // `reference`: required for dpo, ppo, and grpo with beta > 0; may be null otherwise.
  // `value`: PPO's value model (required for ppo, unused otherwise). `comm`: the ranks the
  // step is spread over.
  StepObjective(const TrainConfig& c, ReferenceModel* reference, TrainedValueModel* value = nullptr,
                Communicator& comm = single_process());

  struct Result {
    double loss = 0.0;
    std::map<std::string, double> metrics;  // the objective's statistics, step means
  };
  // Adds this rank's part of the step's gradient into `grads` (the caller zeroes them first;
  // for ppo also the value model's grads, which get the value loss's gradient), through
  // `sync` (the policy's; null on one process) and the value model's parallel(). The result is
  // the whole step's, on every rank.
  Result run(Engine& policy, const StepPart& part, const ParameterSet& grads, DataParallel* sync);
  // The whole step on one process.
  Result run(Engine& policy, const std::vector<PackedBatch>& step, const ParameterSet& grads);

  // The held-out loss: token-weighted NLL for sft; the mean DPO loss over the pairs for dpo;
  // NaN for grpo and ppo (offline rollouts have no held-out loss). With several ranks each
  // scores every ranks-th batch and the sums are added.
  double evaluate(Engine& policy, const std::vector<PackedBatch>& eval);

 private:
  Result run_grpo(Engine& policy, const StepPart& part, const ParameterSet& grads, DataParallel* sync);
  Result run_ppo(Engine& policy, const StepPart& part, const ParameterSet& grads, DataParallel* sync);
  const TrainConfig& c_;
  ReferenceModel* reference_;
  TrainedValueModel* value_;
  Communicator& comm_;
};

// PPO's settings as the objectives take them (gae.h, ppo.h), for a step of `micro_batches`.
PpoRolloutConfig ppo_rollout_config(const TrainConfig& c);
PpoConfig ppo_objective_config(const TrainConfig& c, int64_t micro_batches);

// Whether the objective needs a reference model under this config.
bool needs_reference_model(const TrainConfig& c);

}  // namespace sbp
