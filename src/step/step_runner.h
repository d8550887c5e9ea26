#pragma once
// The one way to run an optimizer step, for every objective and every command: `train`,
// `gradcheck`, `bench`, `score` and `plan` all call StepRunner::run, so what the checks verify
// is what users train with (DESIGN §5).
//
// A step = the micro-batches of a StepBatches (this rank's share). Each micro-batch's objective
// is built with the normalisers of the WHOLE step, so gradient accumulation over micro-batches
// (and ranks) equals one big batch:
//
//   sft   SftObjective; N = the step's loss tokens
//   dpo   DpoObjective; a micro-batch holds whole (chosen, rejected) pairs as consecutive
//         segments; reference log-probs from a forward of the reference model; the loss is the
//         mean over the step's pairs
//   grpo  GrpoObjective; advantages from the rewards of the step's groups (TRL's formula, every
//         group the same size); old log-probs = the micro-batch's, else the current policy's,
//         detached; reference log-probs only when beta != 0; dapo's num_items_in_batch = the
//         step's completion tokens, ga = the step's micro-batches
//   ppo   first, for every micro-batch and before any backward, the rollout constants — old
//         log-probs (the micro-batch's, else the current policy's), reference log-probs, old
//         values (the micro-batch's, else the value model's) and scores = the rewards — and
//         from them per-token rewards, GAE advantages and returns (objective/gae.h
//         ppo_step_advantages: whitened over the whole step, as TRL whitens its whole batch);
//         then per micro-batch PpoPolicyObjective on the policy and PpoValueObjective on the
//         value model, both with ga = the step's micro-batches
//   kto   KtoObjective; first, for every micro-batch and before any backward, the KL
//         estimate's sums (the policy, no grad, and the reference on mismatched pairs); the
//         step's KL is their mean over every sequence of the step, clamped at 0; the loss is the
//         mean over the step's sequences
//   orpo  OrpoObjective; the policy alone (no reference pass); the NLL a mean over the step's
//         chosen rows, the odds term a mean over the step's pairs
//
// Each objective's step is its row in step/objective_steps.h (sft_step.cpp, dpo_step.cpp,
// grpo_step.cpp, ppo_step.cpp, kto_step.cpp, orpo_step.cpp), which says how it runs in more
// detail; run() checks the micro-batches and dispatches to it.
//
// Every forward pass of a reference or value model runs before the policy's backward of the
// same micro-batch, so their working sets are never live beside the policy's checkpoints.
//
// Each micro-batch is prepared for the engine once (validation, index and rope tables:
// step/micro_batch_prep.h) and every pass over it shares that, once per distinct model config.
// The tables live from the micro-batch's first pass to its last: for PPO, whose rollout
// constants of every micro-batch come before any update, that is the whole step, so all of the
// rank's micro-batches' tables (16 T bytes + the (longest segment, h) F32 rope table each) are
// alive together during its updates.
//
// Data parallelism (docs/DISTRIBUTED.md): each rank runs its share of the micro-batches, and
// every step-wide quantity is made global before the first backward: the SFT token count and
// the DPO pair count are summed, GRPO's rewards are gathered in step order, PPO's whitening
// statistics are summed, KTO's KL sums and sequence count and ORPO's pair and NLL row counts
// are summed, dapo's num_items_in_batch and every ga are the step's. Losses and
// statistics are summed / merged over ranks, so every rank returns the whole step's.
// With LoRA the adapters' gradients are summed over ranks once, at the end of run()
// (dist/lora_grads.h): adapters are replicated, not sharded.
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "engine/engine.h"
#include "engine/exec_config.h"
#include "objective/objective_setup.h"
#include "step/micro_batch.h"
#include "step/step_context.h"
#include "step/step_models.h"

namespace sbp {

struct StepResult {
  double loss = 0.0;                      // the step's loss (PPO: policy + value loss)
  std::map<std::string, double> metrics;  // the objective's statistics, step means
  double loss_tokens = 0.0;               // target weight of the step's micro-batches, all ranks
  int64_t tokens = 0;                     // tokens of the step's micro-batches, all ranks
  // (T) per micro-batch of this rank: the policy's target log-probs as the gradient pass saw
  // them (only with StepRunnerOptions::record_logp).
  std::vector<std::vector<float>> logp;
};

class StepRunner {
 public:
  // Throws InputError when `models` lacks a model the objective needs. The policy's gradients
  // may be missing when only score() and evaluate() are called.
  StepRunner(const ObjectiveSetup& objective, const StepModels& models, Backend& be, Pool& pool,
             const ExecConfig& exec, Communicator& comm = single_process(),
             StepRunnerOptions opts = {});

  // One optimizer step's gradients: zeroes the trained models' gradients, then ADDS this rank's
  // micro-batches' contributions (reduced over ranks by the models' DataParallel). Clipping
  // and the optimizer update are the caller's (DataParallel::clip_to, update). = start +
  // finish.
  StepResult run(const StepBatches& step);
  // The same in two halves, so that a step waits for the device once (docs/CUDA.md
  // "Synchronisations"): start() queues the step's work and returns its result without the
  // loss and statistics that wait for values left on the device (SFT's log-probs,
  // engine/deferred_reads.h); finish(r) reads those and completes r. A caller that reads
  // something of its own (the training loop: the gradient norm) does it between the two, so
  // that finish() finds the device idle. `step` must outlive finish(). A start() drops what an
  // earlier start() left unfinished (a step abandoned in an exception).
  StepResult start(const StepBatches& step);
  void finish(StepResult& r);

  // The held-out loss: token-weighted NLL for sft; the mean DPO loss over the pairs for dpo;
  // for orpo the chosen rows' NLL plus the mean odds term; for kto the mean loss over the
  // sequences, with the held-out set's KL; NaN for grpo and ppo (rollouts have no held-out
  // loss). With several ranks each scores every
  // ranks-th micro-batch and the sums are added.
  double evaluate(std::span<const MicroBatch> eval);

  // Forward only: the policy's target log-probs and argmax per row.
  Engine::TokenScores score(const Batch& batch);

  const ObjectiveSetup& objective() const { return ctx_.objective(); }

  // An engine on the policy's current weights, its LoRA adapters on (the policy that samples
  // online rollouts and that score() runs).
  Engine policy_engine() { return ctx_.policy_engine(); }
  // PPO: an engine on the value model's current weights (only a PPO runner has one).
  Engine value_engine() { return ctx_.value_engine(); }

 private:
  // What the objectives' step functions work with (step_context.h), and the step's pending end.
  StepContext ctx_;
};

}  // namespace sbp
