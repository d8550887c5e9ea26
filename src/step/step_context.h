#pragma once
// What an objective's step function (objective_steps.h) works with: the step's models and
// engines, its passes, and the one place where what a step leaves for its end is kept. The step
// runner (step_runner.h) owns one and hands it to the objective's row; callers of the runner see
// none of this.
//
// The end of a step. On an asynchronous backend the losses and statistics of a step are read
// with the step's one wait (docs/CUDA.md "no host wait in the head"): the engine queues its
// reads (engine/deferred_reads.h) and the objectives add them up there. So a step function
// keeps its objectives here (keep), and the context, after the engine's reads, completes the
// step's loss and statistics from them:
//
//   loss        the kept objectives' losses, in the order kept, then summed over ranks
//   statistics  the means of the objectives' metrics(), each weighted by the weight it was kept
//               with (its micro-batch's pairs, sequences or tokens: weighted_means.h), merged
//               over ranks (every rank merges, one with no micro-batch too: the collective
//               must match); objectives kept with keep_alive() add neither
//
// then runs what the step function added with at_finish(), in that order (GRPO's mean reward,
// PPO's own merge of its two models' statistics).
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "engine/deferred_reads.h"
#include "engine/engine.h"
#include "engine/exec_config.h"
#include "objective/objective.h"
#include "objective/objective_setup.h"
#include "step/micro_batch.h"
#include "step/micro_batch_prep.h"
#include "step/step_models.h"

namespace sbp {

struct StepResult;

// How a step runner's steps run: the log-probs they record, their context group.
struct StepRunnerOptions {
  bool record_logp = false;  // fill StepResult::logp
  // Context parallelism (engine/context_slice.h): every engine of the step is a rank of this
  // group, which shares each micro-batch's rows. The gradients each rank ADDS are then its
  // rows' share; the group's sum is the micro-batch's gradient (summing is the caller's: the
  // models' DataParallel over every rank, or a test). Null: none.
  Communicator* context = nullptr;
};

class StepContext {
 public:
  // Throws InputError when `models` lacks a model the objective needs.
  StepContext(const ObjectiveSetup& objective, const StepModels& models, Backend& be, Pool& pool,
              const ExecConfig& exec, Communicator& comm, StepRunnerOptions opts);
  StepContext(const StepContext&) = delete;
  StepContext& operator=(const StepContext&) = delete;

  const ObjectiveSetup& objective() const { return setup_; }
  const StepModels& models() const { return models_; }
  Communicator& comm() { return comm_; }
  Backend& backend() { return be_; }
  Pool& pool() { return pool_; }
  const StepRunnerOptions& options() const { return opts_; }
  // Whether the step's engines share their rows with a context group (StepRunnerOptions).
  bool context_parallel() const { return opts_.context != nullptr; }

  // An engine on the policy's current weights, its LoRA adapters on.
  Engine policy_engine();
  // The reference model, or with LoRA and no separate reference the policy's adapters off.
  Engine reference_engine();
  const ModelConfig& reference_config() const;
  // PPO: an engine on the value model's current weights.
  Engine value_engine();
  // Forward only: the policy's target log-probs and argmax per row.
  Engine::TokenScores score(const Batch& batch) { return policy_engine().score(batch); }

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
  // The objective's loss may be complete only at the step's end (the engine's reads): keep it.
  // `logp`: where the gradient pass's log-probs are recorded, or null (logp_slot).
  void backward_slot(const TrainedView& model, MicroBatchPrep& prep, Objective& objective,
                     int64_t slot, std::vector<float>* logp);
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

  // Keeps `objective` to the step's end, its loss in the step's loss and its statistics
  // weighing `weight` in the step's statistics; returns it for the micro-batch's pass.
  template <class O>
  O& keep(std::unique_ptr<O> objective, double weight) {
    O& o = *objective;
    kept_.push_back({std::move(objective), weight});
    return o;
  }
  // Keeps `objective` alive to the step's end and no more: what its loss and statistics add to
  // the step is the step function's own at_finish().
  template <class O>
  O& keep_alive(std::unique_ptr<O> objective) {
    O& o = *objective;
    kept_.push_back({std::move(objective), std::nullopt});
    return o;
  }
  // Runs `complete` at the step's end, after the kept objectives completed the result, in the
  // order added.
  void at_finish(std::function<void(StepResult&)> complete);

  // This rank's share of a held-out set: every ranks-th micro-batch from its rank, in order.
  // Each evaluate function sums over its share, then over ranks (Communicator::sum).
  std::vector<const MicroBatch*> eval_share(std::span<const MicroBatch> eval);

  // The step runner's (step_runner.h): forget what an abandoned step left, and finish a step.
  void begin_step();
  void finish_step(StepResult& r);
  // Throws InputError when the policy (or its LoRA adapters) has no gradients to add into.
  void check_trained() const;
  // Zeroes the trained models' gradients (LoRA: the adapters') for a step of `slots` slots;
  // after the step function, sums the LoRA adapters' gradients over ranks.
  void zero_grads(int64_t slots);
  void reduce_lora_grads();

 private:
  struct Kept {
    std::unique_ptr<Objective> objective;
    std::optional<double> weight;  // none: kept alive only (keep_alive)
  };

  void skip_slot(int64_t slot);
  // An engine on these weights, in the step's exec config and context group.
  Engine engine(const ModelConfig& cfg, const ParameterSet& weights);
  void complete_kept(StepResult& r);

  ObjectiveSetup setup_;
  StepModels models_;
  Backend& be_;
  Pool& pool_;
  ExecConfig exec_;
  Communicator& comm_;
  StepRunnerOptions opts_;
  ParameterSet frozen_;  // with LoRA: the policy's gradients, unallocated (no buffer, no gradient)
  // Between a step's start and its finish: the engines' reads left for the step's end, the
  // objectives whose losses they complete, then what the step function adds.
  DeferredReads reads_;
  std::vector<Kept> kept_;
  std::vector<std::function<void(StepResult&)>> completions_;
};

}  // namespace sbp
