#pragma once
// The data of a training run and where each step's micro-batches come from: offline, data.train
// packed into micro-batches and walked in epochs (train_batches.h), with data.eval's held-out
// micro-batches; online GRPO/PPO, the prompt records of data.train and the rollouts sampled from
// them at each step (online_rollouts.h). Its cursor is what a checkpoint stores of the data.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "model/config.h"
#include "step/micro_batch.h"
#include "step/step_runner.h"
#include "train/checkpoint.h"
#include "train/online_rollouts.h"
#include "train/run_log.h"
#include "train/train_batches.h"
#include "train/train_config.h"
#include "train/train_data.h"

namespace sbp {

class RunData {
 public:
  // Reads and checks the data against the policy's config, and, resuming from `ckpt` (not ""),
  // against the checkpoint's `resumed` state; prints its summary. InputError on bad input.
  RunData(const TrainConfig& c, const ModelConfig& policy, Communicator& comm,
          const std::string& ckpt, const TrainerState& resumed, const RunLog& log);

  // The run's length in steps of `per_step` micro-batches: max_steps, or `epochs` epochs.
  int64_t total_steps(int64_t per_step);
  // At epoch 0 (a fresh run), or at a checkpoint's cursor (its trainer_state.json is `where`).
  void start();
  void resume(const TrainerState& resumed, const std::string& where);
  // This rank's micro-batches of the step after `step`: the next packed ones offline; online,
  // rollouts sampled from the runner's policy (with the adapters on; scored by its value model).
  StepBatches next(int64_t per_step, StepRunner& runner, bool value_model, int64_t step);

  const DataCursor& cursor() const;
  double epoch_progress() const;
  const std::vector<MicroBatch>& eval() const { return eval_; }  // empty: no evaluation
  OnlineRollouts* online() { return online_.get(); }             // null offline
  const nlohmann::json& fingerprints() const { return data_.fingerprints; }
  int64_t longest_prompt() const { return online_ ? online_->longest_prompt() : 0; }

 private:
  void load_offline(const ModelConfig& policy);
  void pack_eval();
  void load_prompts(const ModelConfig& policy);

  const TrainConfig& c_;
  Communicator& comm_;
  const RunLog& log_;
  TrainingData data_;
  std::vector<MicroBatch> eval_;
  std::unique_ptr<TrainBatches> batches_;  // offline
  std::optional<PromptEncoder> prompt_encoder_;
  std::unique_ptr<OnlineRollouts> online_;  // online GRPO/PPO (prompt records)
};

}  // namespace sbp
