#pragma once
// What a training run writes beside its checkpoints (rank 0 only): metrics.jsonl, one line per
// step and the evaluation before training (docs/TRAINING.md lists the fields), and online
// GRPO/PPO's completions.jsonl, a few sampled completions every log_completions_every steps.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/ledger.h"
#include "dist/communicator.h"
#include "step/model_set.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/online_rollouts.h"
#include "train/training_loop.h"

namespace sbp {

class RunMetrics {
 public:
  explicit RunMetrics(Communicator& comm) : comm_(comm), t_start_(Clock::now()) {}

  // Opens a file (rank 0): `resumed_step` < 0 starts it anew, else drops its lines past that
  // step (metrics.h).
  void open_metrics(const std::string& path, int64_t resumed_step);
  void open_completions(const std::string& path, int64_t resumed_step);
  void write_eval(int64_t step, double eval_loss);
  // The line of step `state.step`, taken as `s` says, `step_s` seconds in all. Every rank calls
  // it (the peak memory is the maximum over the ranks); rank 0 writes.
  void write_step(const StepRecord& s, const TrainerState& state, double epoch, double step_s,
                  const Ledger& ledger, const Ledger* host_ledger, ModelSet& models,
                  const OnlineRollouts* online,
                  std::optional<double> eval_loss);
  // The step's first prompts (at most 4) with every completion and its rewards.
  void log_completions(int64_t step, const OnlineRollouts& online);
  double elapsed_s() const;
  // Called with every line written to metrics.jsonl (rank 0), after it is written: the Python
  // package's train(callbacks=...) (TrainConfig::on_metrics).
  void set_listener(std::function<void(const nlohmann::ordered_json&)> f) {
    listener_ = std::move(f);
  }

 private:
  using Clock = std::chrono::steady_clock;
  Communicator& comm_;
  Clock::time_point t_start_;
  std::optional<MetricsLog> metrics_;
  std::optional<MetricsLog> completions_;
  std::function<void(const nlohmann::ordered_json&)> listener_;
};

}  // namespace sbp
