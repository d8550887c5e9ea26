#pragma once
// `streambp train CONFIG.yaml`: the training loop (docs/TRAINING.md).
//
// One optimizer step = `grad_accum` packed micro-batches per rank of the current epoch
// (train_batches.h), run by the step runner every command shares (step/step_runner.h), then
// gradient clipping and AdamW. The SFT loss of a step is normalised by the loss tokens of ALL
// its micro-batches, so accumulation equals one big batch. A checkpoint stores the weights, the
// optimizer, the data cursor and the RNG state, so a resumed run continues bit-exactly.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/online_rollouts.h"
#include "train/step_progress.h"
#include "train/train_batches.h"
#include "train/train_config.h"
#include "train/train_data.h"

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

// One training run, set up and ready to step. run_training builds one and calls run(); tests
// can also take a step's pieces apart.
class Trainer {
 public:
  // Sets up everything (model, data, optimizer, reference and value models, resume state) and
  // prints the run's summary. InputError on bad input, before anything is written.
  Trainer(const TrainConfig& c, const std::string& resume, Communicator& comm);
  // With the backend made already (run_training: a GPU rank's collectives need it first).
  Trainer(const TrainConfig& c, const std::string& resume, Communicator& comm,
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
  using Clock = std::chrono::steady_clock;
  // Set-up, in order.
  void load_inputs(const std::string& resume);
  void plan_schedule();
  void build_models();
  void load_policy();
  void load_policy_values(ParameterSet& fp32);
  // LoRA: the frozen base from the starting model, the adapters drawn (or from the checkpoint).
  void load_lora_policy();
  // A resumed run's data cursor and counters.
  void resume_state();
  void load_reference();
  void load_value();
  void print_summary() const;
  // The loop.
  // One step: gradients, clipping, update, evaluation when due, metrics; true to save now.
  void train_step(int64_t stop_at, bool* save_now, bool* stop);
  void check_optimizer_steps(int64_t optimizer_steps, const std::string& dir) const;
  // False (on every rank alike) when the step's loss or a gradient norm is not finite; then
  // on_nonfinite: stop throws, skip returns false and nothing is updated.
  bool finite_step(double loss, double grad_norm, double value_grad_norm);
  std::string first_nonfinite_weight();
  void write_step_metrics(const StepResult& r, int64_t micro_batches, double lr, double grad_norm,
                          double value_grad_norm, double step_s, bool evaluated);
  // Online GRPO/PPO: the prompts, their encoder and the rollout source (null offline).
  void load_prompts();
  void log_completions();
  const DataCursor& data_cursor() const;
  double epoch_progress() const;
  std::string save();
  bool stop_requested_anywhere();
  int finish(int64_t last_saved);

  struct Log {
    bool lead = true;  // rank 0 speaks; errors are thrown, and reported, on every rank
    void out(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
    void err(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));
  };

  const TrainConfig& c_;
  Communicator& comm_;
  Log log_;
  Clock::time_point t_start_;
  ObjectiveSetup setup_;
  ModelConfig cfg_;        // the policy's
  std::string start_dir_;  // the starting model's directory ("" when randomly initialised)
  std::string ckpt_;       // the checkpoint resumed from ("" for a fresh run)
  TrainerState resumed_;
  TrainingData data_;
  std::vector<MicroBatch> eval_;
  std::unique_ptr<TrainBatches> batches_;  // offline data
  std::optional<PromptEncoder> prompt_encoder_;
  std::unique_ptr<OnlineRollouts> online_;  // online GRPO/PPO (prompt records)
  std::optional<MetricsLog> completions_;   // <output_dir>/completions.jsonl
  int64_t per_step_ = 1;  // micro-batches per step, all ranks
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
  std::optional<MetricsLog> metrics_;
  std::optional<StepProgress> progress_;
  double last_loss_ = 0.0;
  double last_eval_ = 0.0;
};

}  // namespace sbp
