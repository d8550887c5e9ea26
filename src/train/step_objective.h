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
//
// PPO needs a value model trained alongside; the trainer does not run it yet.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/packing.h"
#include "engine/engine.h"
#include "engine/reference_model.h"
#include "train/train_config.h"

namespace sbp {

class StepObjective {
 public:
  // `reference`: required for dpo, and for grpo with beta > 0; may be null otherwise.
  StepObjective(const TrainConfig& c, ReferenceModel* reference);

  struct Result {
    double loss = 0.0;
    std::map<std::string, double> metrics;  // the objective's statistics, step means
  };
  // Adds the step's gradient into `grads` (the caller zeroes them first).
  Result run(Engine& policy, const std::vector<PackedBatch>& step, const ParameterSet& grads);

  // The held-out loss: token-weighted NLL for sft; the mean DPO loss over the pairs for dpo;
  // NaN for grpo (offline rollouts have no held-out loss).
  double evaluate(Engine& policy, const std::vector<PackedBatch>& eval);

 private:
  const TrainConfig& c_;
  ReferenceModel* reference_;
};

// Whether the objective needs a reference model under this config.
bool needs_reference_model(const TrainConfig& c);

}  // namespace sbp
