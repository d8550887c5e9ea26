#pragma once
// `streambp train CONFIG.yaml`: a training run (docs/TRAINING.md).
//
// One optimizer step = `grad_accum` packed micro-batches per rank of the current epoch
// (train_batches.h), run by the step runner every command shares (step/step_runner.h), then
// gradient clipping and AdamW. The SFT loss of a step is normalised by the loss tokens of ALL
// its micro-batches, so accumulation equals one big batch. A checkpoint stores the weights, the
// optimizer, the data cursor and the RNG state, so a resumed run continues bit-exactly.
//
// The Trainer ties together parts with one job each:
//   run_data.h       the data, and where each step's micro-batches come from
//   step/model_set.h the models (weights, gradients, optimizer states), as the ranks divide them
//   run_models.h     what the models are loaded from, and the checkpoints they are saved to
//   training_loop.h  the loop: gradients, clipping, update (the demo runs on it too)
//   run_metrics.h    metrics.jsonl and completions.jsonl
//   step_progress.h  the progress line
// and decides what only a run decides: its length and schedule, when to evaluate and save, what
// a non-finite step does (on_nonfinite), and how a signal stops it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "train/checkpoint.h"
#include "train/run_data.h"
#include "train/run_log.h"
#include "train/run_metrics.h"
#include "train/run_models.h"
#include "train/step_progress.h"
#include "train/train_config.h"
#include "train/training_loop.h"

namespace sbp {

// Runs the configured training (or the built-in demo for a `demo:` config). `resume` is a
// checkpoint directory or an output directory ("" for a fresh run). Returns the exit code:
// 0 when done, kInterruptedExitCode (130) after SIGINT/SIGTERM with a checkpoint saved.
// Bad input throws InputError.
int run_training(const TrainConfig& cfg, const std::string& resume);

// The same as one rank of a data-parallel run over `comm` (docs/DISTRIBUTED.md): every rank
// calls it with the same config; rank i of N trains on micro-batches i, i+N, ... of each step
// (ranks x grad_accum of them); only rank 0 prints and writes metrics and checkpoints (every
// rank its optimizer shards under dist.zero 1/2). With one rank it is the call above.
int run_training(const TrainConfig& cfg, const std::string& resume, Communicator& comm);

// The communicators of a run: `world` every rank (gradients, checkpoints, agreement: rank 0
// writes), `data` the ranks that split the batch (with context parallelism, one rank of each
// context group; else the world), `context` the ranks sharing this rank's micro-batches' rows
// (null without context parallelism).
struct RunRanks {
  Communicator& world;
  Communicator& data;
  Communicator* context = nullptr;
};

// One training run, set up and ready to step. run_training builds one and calls run(); tests
// can also take a step's pieces apart.
class Trainer : private StepHooks {
 public:
  // Sets up everything (model, data, optimizer, reference and value models, resume state) and
  // prints the run's summary. InputError on bad input, before anything is written.
  Trainer(const TrainConfig& c, const std::string& resume, Communicator& comm);
  // With the backend made already (run_training: a GPU rank's collectives need it first).
  Trainer(const TrainConfig& c, const std::string& resume, RunRanks ranks,
          std::unique_ptr<Backend> backend);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The loop to the end (or stop_after_steps, or a stop signal); the exit code.
  int run();

  // The pieces of one step, for tests: this rank's micro-batches of the next step (advances the
  // data cursor), and their gradients in models() (no optimizer update).
  StepBatches next_step_batches();
  StepResult gradients(const StepBatches& step);
  ModelSet& models() { return *models_; }
  Backend& backend() { return *be_; }
  const ExecConfig& exec() const { return exec_; }

 private:
  // Set-up, in order.
  void load_inputs(const std::string& resume);
  void plan_schedule();
  void check_zero3() const;  // what dist.zero 3 does not run yet, refused by key
  void build_models();
  ModelSources sources() const;  // where the models come from (train/run_models.h)
  // The data at epoch 0, or a resumed run's data cursor and counters.
  void start_data();
  void print_summary() const;
  // The loop (train/training_loop.h) and what this run does around its steps.
  void evaluate_before_training();
  StepBatches next_batches(int64_t step) override;
  bool accept(const StepRecord& s) override;  // finite_step
  bool after_step(const StepRecord& s) override;
  // False (on every rank alike) when the step's loss or a gradient norm is not finite; then
  // on_nonfinite: stop throws, skip returns false and nothing is updated.
  bool finite_step(double loss, double grad_norm, double value_grad_norm);
  std::string save();
  bool stop_requested_anywhere();
  // The ways out of run(): a signal while a reward was pending, a reward's failure (throws),
  // a signal after a step, the end (or stop_after_steps).
  int stop_while_reward_pending();
  [[noreturn]] void stop_after_reward_error(const RewardError& e);
  int stop_after_signal();
  int finish(int64_t last_saved);

  const TrainConfig& c_;
  Communicator& world_;    // every rank
  Communicator& comm_;     // the data group: micro-batches, normalisers, metrics
  Communicator* context_;  // the context group, or null
  RunLog log_;
  RunMetrics metrics_;  // metrics.jsonl, completions.jsonl (rank 0)
  ObjectiveSetup setup_;
  RunStart start_;  // the starting model, and the checkpoint resumed from (run_models.h)
  std::optional<RunData> data_;  // the data and where each step's micro-batches come from
  int64_t per_step_ = 1;         // micro-batches per step, all ranks
  LrSchedule schedule_;
  AdamWConfig optim_;
  DType save_dtype_ = DType::F32;
  std::unique_ptr<Backend> be_;
  Ledger ledger_;
  Pool pool_{ledger_, *be_};  // in the backend's memory (be_ is made first)
  Ledger host_ledger_;        // offload (config `offload`): what waits in host memory
  Pool host_pool_{host_ledger_, be_->host_memory()};
  ExecConfig exec_;
  std::unique_ptr<ModelSet> models_;
  std::unique_ptr<StepRunner> runner_;
  TrainerState state_;
  std::optional<StepProgress> progress_;
  double last_loss_ = 0.0;
  double last_eval_ = 0.0;
  int64_t stop_at_ = 0;      // this invocation's last step (stop_after_steps)
  int64_t last_saved_ = -1;  // the step of the last checkpoint this invocation wrote
  bool stopped_ = false;     // by a signal (to any rank)
};

}  // namespace sbp
