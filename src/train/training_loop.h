#pragma once
// The training loop, the one `streambp train` and the built-in demo both run: each optimizer
// step takes its micro-batches from the run (StepHooks::next_batches), computes their gradients
// (step/step_runner.h), clips every trained model's gradients to max_grad_norm, and updates the
// models with AdamW at the schedule's learning rate, unless the run refuses the step
// (StepHooks::accept: a non-finite loss or norm). What a run does around the steps (evaluation,
// metrics, the progress line, checkpoints, stopping) is its after_step.
#include <chrono>
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "optim/lr_schedule.h"
#include "step/micro_batch.h"
#include "step/model_set.h"
#include "step/step_runner.h"

namespace sbp {

// One step as the loop ran it.
struct StepRecord {
  int64_t step = 0;           // 1-based: the step just taken
  StepResult result;          // loss, tokens, the objective's metrics
  int64_t micro_batches = 0;  // of the whole step, every rank
  double lr = 0.0;
  double grad_norm = 0.0;        // before clipping: the adapters' with LoRA, else the policy's
  double value_grad_norm = 0.0;  // PPO's value model (0 without one)
  bool updated = false;          // false: accept() refused the step, the weights are unchanged
  // Wall time of the optimizer update (with offload: optimizer the host's AdamW and the queued
  // copy of the weights to the device); 0 when not updated.
  double update_s = 0.0;
  std::chrono::steady_clock::time_point started;  // before its batches were made
};

// What a run plugs into the loop.
class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // This rank's micro-batches of step `step` (1-based).
  virtual StepBatches next_batches(int64_t step) = 0;
  // After the gradients and their clipping, before the update: false skips the update.
  virtual bool accept(const StepRecord& s) = 0;
  // After the update: false ends the loop.
  virtual bool after_step(const StepRecord& s) = 0;
};

// The name of the first trained tensor (the adapters with LoRA, else the policy's weights; the
// value model's) that holds a NaN or an infinity, or "": what a run names when a step is not
// finite, to tell weights an earlier update overflowed from this step's arithmetic.
std::string first_nonfinite_weight(ModelSet& models, Backend& be);

class TrainingLoop {
 public:
  TrainingLoop(ModelSet& models, StepRunner& runner, Backend& be, const LrSchedule& schedule,
               double max_grad_norm)
      : models_(models), runner_(runner), be_(be), schedule_(schedule), max_norm_(max_grad_norm) {}

  // Steps first + 1 .. last, or until after_step says stop; the last step taken. Exceptions of
  // the hooks leave through here, the step they came from not taken.
  int64_t run(int64_t first, int64_t last, StepHooks& hooks);

 private:
  StepRecord step(int64_t step, StepHooks& hooks);
  // Each trained model's gradient norm (the step's wait for the device), then the clipping of
  // its gradients to max_grad_norm by those norms.
  void measure_norms(StepRecord& s);
  std::vector<Tensor> lora_parts();  // the adapters' gradients, in order
  void clip(const StepRecord& s);
  void update(double lr);

  ModelSet& models_;
  StepRunner& runner_;
  Backend& be_;
  const LrSchedule& schedule_;
  double max_norm_;
};

}  // namespace sbp
