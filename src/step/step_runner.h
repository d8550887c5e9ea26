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
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "engine/deferred_reads.h"
#include "engine/engine.h"
#include "engine/exec_config.h"
#include "objective/objective_setup.h"
#include "step/micro_batch.h"
#include "step/micro_batch_prep.h"
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

struct StepRunnerOptions {
  bool record_logp = false;  // fill StepResult::logp
  // Context parallelism (engine/context_slice.h): every engine of the step is a rank of this
  // group, which shares each micro-batch's rows. The gradients each rank ADDS are then its
  // rows' share; the group's sum is the micro-batch's gradient (summing is the caller's: the
  // models' DataParallel over every rank, or a test). Null: none.
  Communicator* context = nullptr;
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

  const ObjectiveSetup& objective() const { return setup_; }

  // An engine on the policy's current weights, its LoRA adapters on (the policy that samples
  // online rollouts and that score() runs).
  Engine policy_engine();
  // PPO: an engine on the value model's current weights (only a PPO runner has one).
  Engine value_engine();

  // For the objectives' step functions (step/objective_steps.h), not for callers.
  Communicator& comm() { return comm_; }
  // Whether the step's engines share their rows with a context group (StepRunnerOptions).
  bool context_parallel() const { return opts_.context != nullptr; }
  Backend& backend() { return be_; }
  Pool& pool() { return pool_; }
  const StepModels& models() const { return models_; }
  // The reference model, or with LoRA and no separate reference the policy's adapters off.
  Engine reference_engine();
  const ModelConfig& reference_config() const;
  // Forward only on `engine` (the reference model, or the policy without grad): the batch's
  // target log-probs for an objective (objective.h ReferenceLogp), their host copy coming with
  // the backend's next wait (Backend::download_at_next_wait; finish_reads() waits for it at
  // once), the device vector kept in *device when given (ReferenceLogp::device views it while
  // the caller keeps it). With a context group, whose ranks each hold only their rows, they are
  // read now, every row on every rank, and *device stays empty.
  ReferenceLogp logp_at_next_wait(Engine& engine, const PreparedBatch& batch,
                                  Buffer* device = nullptr);
  // The same for a value model's values (Engine::rows_on_device), the device vector kept in
  // *device when given.
  std::shared_ptr<const std::vector<float>> values_at_next_wait(Engine& engine,
                                                                const PreparedBatch& batch,
                                                                Buffer* device = nullptr);
  // Slot `slot`'s forward_backward on one trained model, with the reduction hook of its slot.
  // The objective's loss may be complete only in finish() (Engine::forward_backward's `later`):
  // it must live until then, and what reads its loss is added with at_finish().
  void backward_slot(const TrainedView& model, MicroBatchPrep& prep, Objective& objective,
                     int64_t slot, std::vector<float>* logp);
  // Runs `complete` in finish(), after the step's deferred reads, in the order added.
  void at_finish(std::function<void(StepResult&)> complete);
  // fn(i, slot) for each of this rank's micro-batches i in its slot; the empty slots a rank has
  // at a step's end are skipped for it (DataParallel::empty_slot), so every rank's collectives
  // match.
  template <class Fn>
  void for_each_slot(const StepBatches& step, Fn fn) {
    for (int64_t slot = 0; slot < step.slots; ++slot) {
      const size_t i = static_cast<size_t>(slot);
      if (i < step.micro.size())
        fn(i, slot);
      else
        skip_slot(slot);
    }
  }
  // Where micro-batch i's log-probs are recorded, or null (StepRunnerOptions::record_logp).
  std::vector<float>* logp_slot(StepResult& r, size_t i);

 private:
  void skip_slot(int64_t slot);
  // An engine on these weights, in the step's exec config and context group.
  Engine engine(const ModelConfig& cfg, const ParameterSet& weights);

  ObjectiveSetup setup_;
  StepModels models_;
  Backend& be_;
  Pool& pool_;
  ExecConfig exec_;
  Communicator& comm_;
  StepRunnerOptions opts_;
  ParameterSet frozen_;  // with LoRA: the policy's gradients, unallocated (no buffer, no gradient)
  // Between start() and finish(): the engines' reads left for the step's end, then what
  // completes the result from them.
  DeferredReads reads_;
  std::vector<std::function<void(StepResult&)>> completions_;
};

}  // namespace sbp
