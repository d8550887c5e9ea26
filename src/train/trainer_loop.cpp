// The training loop of Trainer (trainer.h): steps, evaluation, metrics, checkpoints, stopping.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/stop_signal.h"
#include "train/trainer.h"
#include "train/run_models.h"
#include "train/training_loop.h"

namespace sbp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int Trainer::run() {
  if (state_.step >= state_.total_steps) {
    log_.out("nothing to do: the checkpoint is at step %lld of %lld\n",
             static_cast<long long>(state_.step), static_cast<long long>(state_.total_steps));
    return 0;
  }
  // Rank 0 writes the metrics and the checkpoints (each rank its optimizer shards).
  if (log_.lead) {
    remove_stale_staging(c_.output_dir);
    metrics_.open_metrics(c_.metrics, start_.ckpt.empty() ? -1 : state_.step);
    metrics_.set_listener(c_.on_metrics);
  }
  if (stop_requested_anywhere()) {
    log_.err("streambp: interrupted before the first step; nothing saved\n");
    return kInterruptedExitCode;
  }
  evaluate_before_training();
  // This invocation ends at stop_at_: the run's end, or earlier with stop_after_steps.
  stop_at_ = c_.stop_after_steps > 0
                 ? std::min(state_.total_steps, state_.step + c_.stop_after_steps)
                 : state_.total_steps;
  progress_.emplace(state_.step, state_.total_steps);
  if (data_->online() && log_.lead && c_.log_completions_every > 0)
    metrics_.open_completions(c_.output_dir + "/completions.jsonl",
                              start_.ckpt.empty() ? -1 : state_.step);
  TrainingLoop loop(*models_, *runner_, *be_, schedule_, c_.max_grad_norm);
  try {
    loop.run(state_.step, stop_at_, *this);  // next_batches, accept, after_step below
    // A reward program's output is read to its end: an extra line it wrote is an error even
    // when it came after the last request.
    if (!stopped_ && data_->online()) data_->online()->finish_rewards();
  } catch (const RewardInterrupted&) {
    return stop_while_reward_pending();
  } catch (const RewardError& e) {
    stop_after_reward_error(e);
  }
  if (stopped_) return stop_after_signal();
  return finish(last_saved_);
}

// Ctrl-C or SIGTERM while a reward program was pending: the stop path, as after a step. The
// step changed nothing yet; the checkpoint is of the last step taken.
int Trainer::stop_while_reward_pending() {
  if (log_.lead) progress_->finish();
  if (last_saved_ != state_.step) log_.err("saved %s\n", save().c_str());
  log_.err(
      "streambp: stopped by signal %d while a reward was pending, before step %lld; "
      "resume from %s\n",
      stop_signal_number(), static_cast<long long>(state_.step + 1), c_.output_dir.c_str());
  return kInterruptedExitCode;
}

// A reward function failed before the step changed anything: keep what was trained.
void Trainer::stop_after_reward_error(const RewardError& e) {
  if (log_.lead) progress_->finish();
  // Saved unless the last save was of this very step.
  const std::string saved =
      last_saved_ != state_.step
          ? "saved " + save()
          : "the checkpoint of step " + std::to_string(state_.step) + " is in " + c_.output_dir;
  const std::string when = state_.step >= stop_at_ ? "after step " + std::to_string(state_.step)
                                                  : "before step " + std::to_string(state_.step + 1);
  throw RewardError(std::string(e.what()) + "; stopped " + when + ", " + saved);
}

// after_step saved the step a signal (to any rank) stopped after.
int Trainer::stop_after_signal() {
  if (log_.lead) progress_->finish();
  const std::string by = stop_signal_number() != 0
                             ? "signal " + std::to_string(stop_signal_number())
                             : std::string("a signal to another rank");
  log_.err("streambp: stopped by %s after step %lld; resume from %s\n", by.c_str(),
           static_cast<long long>(state_.step), c_.output_dir.c_str());
  return kInterruptedExitCode;
}

void Trainer::evaluate_before_training() {
  last_eval_ = std::nan("");
  if (!start_.ckpt.empty() || data_->eval().empty()) return;
  last_eval_ = runner_->evaluate(data_->eval());
  metrics_.write_eval(0, last_eval_);
  log_.out("eval loss before training: %.4f\n", last_eval_);
  std::fflush(stdout);
}

StepBatches Trainer::next_batches(int64_t /*step*/) {
  ledger_.reset_peak();  // the step's peak covers the generation of online rollouts too
  host_ledger_.reset_peak();
  return next_step_batches();
}

bool Trainer::accept(const StepRecord& s) {
  return finite_step(s.result.loss, s.grad_norm, s.value_grad_norm);
}

// The step's bookkeeping: the data cursor and counters, evaluation when due, the metrics line,
// the progress line; then a checkpoint when due, and the stop a signal asked for.
bool Trainer::after_step(const StepRecord& s) {
  const StepResult& r = s.result;
  const std::vector<MicroBatch>& eval = data_->eval();
  OnlineRollouts* online = data_->online();
  if (!s.updated) ++state_.skipped_steps;
  const DataCursor& cursor = data_->cursor();
  state_.epoch = cursor.epoch;
  state_.micro_batches_done = cursor.micro_batches_done;
  state_.epoch_rng = cursor.epoch_rng;
  state_.tokens_seen += r.tokens;
  state_.step = s.step;
  last_loss_ = r.loss;

  const bool eval_now =
      !eval.empty() && ((c_.eval_every > 0 && state_.step % c_.eval_every == 0) ||
                         state_.step == state_.total_steps);
  if (eval_now) last_eval_ = runner_->evaluate(eval);
  const double step_s = seconds_since(s.started);
  metrics_.write_step(s, state_, data_->epoch_progress(), step_s, ledger_,
                      exec_.offload.any() ? &host_ledger_ : nullptr, *models_, online,
                      eval_now ? std::optional<double>(last_eval_) : std::nullopt);
  if (online && online->sampled_last() && c_.log_completions_every > 0 &&
      state_.step % c_.log_completions_every == 0)
    metrics_.log_completions(state_.step, *online);

  char fields[200];
  const std::string reward =
      online ? " | reward " + std::to_string(online->stats().reward_total_mean).substr(0, 6) : "";
  std::snprintf(
      fields, sizeof fields, "loss %.4f%s%s | lr %.2e | grad %.3f | %.0f tok/s", r.loss,
      reward.c_str(),
      std::isnan(last_eval_) ? "" : (" | eval " + std::to_string(last_eval_).substr(0, 6)).c_str(),
      s.lr, s.grad_norm, static_cast<double>(r.tokens) / std::max(step_s, 1e-9));
  stopped_ = stop_requested_anywhere();
  const bool save_now = (c_.save_every > 0 && state_.step % c_.save_every == 0) ||
                        state_.step == stop_at_ || stopped_;
  if (log_.lead) progress_->update(state_.step, fields, eval_now || save_now);
  if (save_now) {
    const std::string path = save();
    last_saved_ = state_.step;
    log_.err("saved %s\n", path.c_str());
  }
  return !stopped_;
}

bool Trainer::finite_step(double loss, double grad_norm, double value_grad_norm) {
  const bool finite =
      std::isfinite(loss) && std::isfinite(grad_norm) && std::isfinite(value_grad_norm);
  if (world_.max(int64_t{finite ? 0 : 1}) == 0) return true;
  const int64_t step = state_.step + 1;
  auto number = [](double x) {  // "nan", not the "-nan" printf may write
    if (std::isnan(x)) return std::string("nan");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  std::string what = "loss " + number(loss) + ", gradient norm " + number(grad_norm);
  if (models_->has_value()) what += ", value gradient norm " + number(value_grad_norm);
  // What enters a step from outside is checked where it enters (weights, adapters and the value
  // head when read, rewards when scored or read, a GRPO group of at least two completions), so
  // a non-finite step is the arithmetic's: the weights an earlier update wrote, or this step's
  // numbers. The weights are looked at here (only on this path) to tell the two apart.
  const std::string bad_tensor = first_nonfinite_weight(*models_, *be_);
  const std::string cause =
      bad_tensor.empty()
          ? "lower optim.lr"
          : "the weights entering the step are not finite (" + bad_tensor +
                "): an earlier update overflowed them; lower optim.lr and resume from an earlier "
                "checkpoint";
  what += bad_tensor.empty() ? "" : "; " + bad_tensor + " is not finite";
  if (c_.on_nonfinite == NonFinitePolicy::skip) {
    log_.err("streambp: step %lld skipped (on_nonfinite: skip): %s; %lld skipped so far\n",
             static_cast<long long>(step), what.c_str(),
             static_cast<long long>(state_.skipped_steps + 1));
    return false;
  }
  if (log_.lead && progress_) progress_->finish();
  throw TrainingStopped("step " + std::to_string(step) + ": not finite (" + what +
                        "); stopped before updating the weights, nothing saved after step " +
                        std::to_string(state_.step) +
                        " (on_nonfinite: stop; " + cause + ", or set on_nonfinite: skip)");
}

std::string Trainer::save() {
  state_.rollouts = data_->online() ? data_->online()->rollouts_json() : nlohmann::json();
  return save_models(*models_, sources(), save_dtype_, state_, world_, log_.lead);
}

// A stop request counts when any rank got the signal, so that all ranks save and stop together.
bool Trainer::stop_requested_anywhere() {
  return world_.max(int64_t{stop_requested() ? 1 : 0}) != 0;
}

int Trainer::finish(int64_t last_saved) {
  if (log_.lead) progress_->finish();
  if (last_saved != state_.step) save();
  if (state_.step < state_.total_steps) {
    log_.out(
        "stopped after %lld steps (stop_after_steps), at step %lld of %lld; continue by resuming "
        "from %s\n",
        static_cast<long long>(c_.stop_after_steps), static_cast<long long>(state_.step),
        static_cast<long long>(state_.total_steps), c_.output_dir.c_str());
    return 0;
  }
  log_.out(
      "done: %lld steps, last loss %.4f%s, %.1f s; checkpoint %s/checkpoint-%lld, metrics %s\n",
      static_cast<long long>(state_.step), last_loss_,
      std::isnan(last_eval_) ? "" : (", eval loss " + std::to_string(last_eval_)).c_str(),
      metrics_.elapsed_s(), c_.output_dir.c_str(), static_cast<long long>(state_.step),
      c_.metrics.c_str());
  return 0;
}

}  // namespace sbp
