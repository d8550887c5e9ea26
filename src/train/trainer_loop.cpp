// The training loop of Trainer (trainer.h): steps, evaluation, metrics, checkpoints, stopping.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/process_memory.h"
#include "core/stop_signal.h"
#include "train/trainer.h"

namespace sbp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

nlohmann::ordered_json memory_json(const MemoryBreakdown& b) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (int i = 0; i < kNumCategories; ++i)
    j[category_name(static_cast<Category>(i))] = b.bytes[static_cast<size_t>(i)];
  j["total"] = b.total();
  return j;
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
    metrics_.emplace(c_.metrics, ckpt_.empty() ? -1 : state_.step);
  }
  if (stop_requested_anywhere()) {
    log_.err("streambp: interrupted before the first step; nothing saved\n");
    return kInterruptedExitCode;
  }
  last_eval_ = std::nan("");
  if (ckpt_.empty() && !eval_.empty()) {
    last_eval_ = runner_->evaluate(eval_);
    if (metrics_) metrics_->write(nlohmann::ordered_json{{"step", 0}, {"eval_loss", last_eval_}});
    log_.out("eval loss before training: %.4f\n", last_eval_);
    std::fflush(stdout);
  }
  // This invocation ends at stop_at: the run's end, or earlier with stop_after_steps.
  const int64_t stop_at = c_.stop_after_steps > 0
                              ? std::min(state_.total_steps, state_.step + c_.stop_after_steps)
                              : state_.total_steps;
  progress_.emplace(state_.step, state_.total_steps);
  int64_t last_saved = -1;
  if (online_ && log_.lead && c_.log_completions_every > 0)
    completions_.emplace(c_.output_dir + "/completions.jsonl", ckpt_.empty() ? -1 : state_.step);
  while (state_.step < stop_at) {
    bool save_now = false, stop = false;
    try {
      train_step(stop_at, &save_now, &stop);
    } catch (const RewardInterrupted& e) {
      // Ctrl-C or SIGTERM while a reward program was pending: the stop path, as after a step.
      // The step changed nothing yet; the checkpoint is of the last step taken.
      if (log_.lead) progress_->finish();
      if (last_saved != state_.step) log_.err("saved %s\n", save().c_str());
      log_.err(
          "streambp: stopped by signal %d while a reward was pending, before step %lld; "
          "resume from %s\n",
          stop_signal_number(), static_cast<long long>(state_.step + 1), c_.output_dir.c_str());
      return kInterruptedExitCode;
    } catch (const RewardError& e) {
      // A reward function failed before the step changed anything: keep what was trained.
      if (log_.lead) progress_->finish();
      // Saved unless the last save was of this very step.
      const std::string saved =
          last_saved != state_.step
              ? "saved " + save()
              : "the checkpoint of step " + std::to_string(state_.step) + " is in " + c_.output_dir;
      throw RewardError(std::string(e.what()) + "; stopped before step " +
                        std::to_string(state_.step + 1) + ", " + saved);
    }
    if (save_now) {
      const std::string path = save();
      last_saved = state_.step;
      log_.err("saved %s\n", path.c_str());
    }
    if (stop) {
      if (log_.lead) progress_->finish();
      const std::string by = stop_signal_number() != 0
                                 ? "signal " + std::to_string(stop_signal_number())
                                 : std::string("a signal to another rank");
      log_.err("streambp: stopped by %s after step %lld; resume from %s\n", by.c_str(),
               static_cast<long long>(state_.step), c_.output_dir.c_str());
      return kInterruptedExitCode;
    }
  }
  return finish(last_saved);
}

void Trainer::train_step(int64_t stop_at, bool* save_now, bool* stop) {
  const auto t_step = Clock::now();
  ledger_.reset_peak();  // the step's peak covers the generation of online rollouts too
  const StepBatches step = next_step_batches();
  const double lr = schedule_.at(state_.step + 1);
  const StepResult r = gradients(step);
  const bool lora = models_->has_lora();
  const double grad_norm = lora ? clip_lora_grads(models_->lora_grads(), *be_, c_.max_grad_norm)
                                : models_->policy().clip(c_.max_grad_norm);
  // PPO: the value model is clipped and stepped on its own.
  const double value_grad_norm =
      models_->has_value() ? models_->value().clip(c_.max_grad_norm) : 0.0;
  const bool update = finite_step(r.loss, grad_norm, value_grad_norm);
  if (update) {
    if (lora)
      models_->lora_optimizer()->step(models_->lora_weights(), models_->lora_grads(), *be_,
                                      static_cast<float>(lr));
    else
      models_->policy().update(models_->policy_weights(), static_cast<float>(lr));
    if (models_->has_value())
      models_->value().update(models_->value_weights(), static_cast<float>(lr));
  } else {
    ++state_.skipped_steps;
  }
  const DataCursor& cursor = data_cursor();
  state_.epoch = cursor.epoch;
  state_.micro_batches_done = cursor.micro_batches_done;
  state_.epoch_rng = cursor.epoch_rng;
  state_.tokens_seen += r.tokens;
  ++state_.step;
  last_loss_ = r.loss;

  const bool eval_now =
      !eval_.empty() && ((c_.eval_every > 0 && state_.step % c_.eval_every == 0) ||
                         state_.step == state_.total_steps);
  if (eval_now) last_eval_ = runner_->evaluate(eval_);
  const double step_s = seconds_since(t_step);
  write_step_metrics(r, step.step_micro_batches, lr, grad_norm, value_grad_norm, step_s, eval_now);
  if (online_ && online_->sampled_last() && c_.log_completions_every > 0 &&
      state_.step % c_.log_completions_every == 0)
    log_completions();

  char fields[200];
  const std::string reward =
      online_ ? " | reward " + std::to_string(online_->stats().reward_total_mean).substr(0, 6) : "";
  std::snprintf(
      fields, sizeof fields, "loss %.4f%s%s | lr %.2e | grad %.3f | %.0f tok/s", r.loss,
      reward.c_str(),
      std::isnan(last_eval_) ? "" : (" | eval " + std::to_string(last_eval_).substr(0, 6)).c_str(),
      lr, grad_norm, static_cast<double>(r.tokens) / std::max(step_s, 1e-9));
  *stop = stop_requested_anywhere();
  *save_now =
      (c_.save_every > 0 && state_.step % c_.save_every == 0) || state_.step == stop_at || *stop;
  if (log_.lead) progress_->update(state_.step, fields, eval_now || *save_now);
}

bool Trainer::finite_step(double loss, double grad_norm, double value_grad_norm) {
  const bool finite =
      std::isfinite(loss) && std::isfinite(grad_norm) && std::isfinite(value_grad_norm);
  if (comm_.max(int64_t{finite ? 0 : 1}) == 0) return true;
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
  const std::string bad_tensor = first_nonfinite_weight();
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

// The name of the first trained tensor (adapters with LoRA, else the policy's weights; the
// value model's) holding a NaN or an infinity, or "".
std::string Trainer::first_nonfinite_weight() {
  auto scan = [&](const auto& set) -> std::string {
    for (size_t i = 0; i < set.size(); ++i)
      if (!std::isfinite(be_->sum_squares(set.tensor(i)))) return set.name(i);
    return "";
  };
  std::string bad = models_->has_lora() ? scan(models_->lora_weights())
                                        : scan(models_->policy_weights());
  if (bad.empty() && models_->has_value()) bad = scan(models_->value_weights());
  return bad;
}

void Trainer::write_step_metrics(const StepResult& r, int64_t micro_batches, double lr,
                                 double grad_norm, double value_grad_norm, double step_s,
                                 bool evaluated) {
  const int64_t peak_max = comm_.size() > 1 ? comm_.max(ledger_.peak()) : ledger_.peak();
  if (!metrics_) return;
  nlohmann::ordered_json line = {
      {"step", state_.step},
      {"epoch", epoch_progress()},
      {"loss", r.loss},
      {"lr", lr},
      {"grad_norm", grad_norm},
      {"tokens", r.tokens},
      {"loss_tokens", static_cast<int64_t>(r.loss_tokens)},
      {"micro_batches", micro_batches},
      {"tokens_per_s", static_cast<double>(r.tokens) / std::max(step_s, 1e-9)},
      {"step_time_s", step_s},
      {"elapsed_s", seconds_since(t_start_)},
      {"peak_memory_bytes", memory_json(ledger_.peak_breakdown())},
      {"peak_rss_bytes", peak_rss_bytes()}};
  if (models_->has_value()) line["value_grad_norm"] = value_grad_norm;
  if (state_.skipped_steps > 0) line["skipped_steps"] = state_.skipped_steps;
  for (const auto& [name, x] : r.metrics) line[name] = x;
  if (evaluated) line["eval_loss"] = last_eval_;
  if (online_ && online_->sampled_last()) {
    // The batch of rollouts this step sampled (steps that reuse a batch repeat none of it).
    const RolloutStats& s = online_->stats();
    for (size_t k = 0; k < s.reward_names.size(); ++k) {
      line["rewards/" + s.reward_names[k] + "/mean"] = s.reward_mean[k];
      line["rewards/" + s.reward_names[k] + "/std"] = s.reward_std[k];
    }
    line["reward"] = s.reward_total_mean;
    line["reward_std"] = s.reward_total_std;
    line["completions/mean_length"] = s.completion_length_mean;
    line["completions/max_length"] = s.completion_length_max;
    line["completions/truncated_fraction"] = s.truncated_fraction;
    line["frac_reward_zero_std"] = s.zero_std_groups;
    line["generation/tokens"] = s.generated_tokens;
    line["generation/seconds"] = s.generation_s;
    line["generation/tokens_per_s"] =
        static_cast<double>(s.generated_tokens) / std::max(s.generation_s, 1e-9);
    line["train/tokens_per_s"] =
        static_cast<double>(r.tokens) / std::max(step_s - s.generation_s, 1e-9);
  }
  if (comm_.size() > 1) {
    // peak_memory_bytes above is rank 0's ledger; the collectives are every rank's.
    const DataParallel::Counters& n = models_->policy().counters();
    line["dist/ranks"] = comm_.size();
    line["dist/zero"] = models_->policy().zero();
    line["dist/grad_reductions"] = n.reductions;
    line["dist/grad_reduced_bytes"] = n.reduced_bytes;
    line["dist/param_allgathers"] = n.gathers;
    line["dist/grad_reductions_done_during_backward"] = n.done_during_backward;
    if (models_->has_value())
      line["dist/value_grad_reductions"] = models_->value().counters().reductions;
    line["dist/peak_memory_max_rank"] = peak_max;
  }
  metrics_->write(line);
}

// A few of the step's prompts (the first ones, at most 4) with every completion and its rewards.
void Trainer::log_completions() {
  if (!completions_) return;
  const std::vector<RolloutSample>& samples = online_->samples();
  const RolloutStats& st = online_->stats();
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (size_t i = 0; i < samples.size();) {
    const int64_t p = samples[i].prompt;
    if (groups.size() == 4) break;
    nlohmann::ordered_json completions = nlohmann::ordered_json::array();
    for (; i < samples.size() && samples[i].prompt == p; ++i) {
      nlohmann::ordered_json rewards = nlohmann::ordered_json::object();
      for (size_t k = 0; k < st.reward_names.size(); ++k)
        rewards[st.reward_names[k]] = samples[i].per_reward[k];
      completions.push_back({{"completion", online_->completion_text(samples[i])},
                             {"tokens", samples[i].ids.size()},
                             {"truncated", samples[i].truncated},
                             {"reward", samples[i].reward},
                             {"rewards", rewards}});
    }
    const PromptRecord& rec = online_->prompt(p);
    groups.push_back({{"prompt", rec.text}, {"record", rec.where}, {"fields", rec.fields},
                      {"completions", completions}});
  }
  completions_->write({{"step", state_.step}, {"prompts", groups}});
}

std::string Trainer::save() {
  state_.rollouts = online_ ? online_->rollouts_json() : nlohmann::json();
  // The fp32 values: the master weights of bf16 weights (whose rounding the export writes).
  auto fp32 = [](ParameterSet& w, DataParallel& dp) -> const ParameterSet& {
    return dp.master() ? *dp.master() : w;
  };
  std::optional<ValueModelContents> value;
  if (models_->has_value())
    value.emplace(ValueModelContents{
        models_->value_config(), fp32(models_->value_weights(), models_->value()),
        [&](const std::string& dir) { models_->value().save_optimizer(dir); }});
  // LoRA: the adapters (PEFT files) and their optimizer; the frozen base is not written.
  const bool lora = models_->has_lora();
  const std::string path = save_checkpoint(
      c_.output_dir,
      CheckpointContents{
          cfg_,
          lora ? models_->policy_weights() : fp32(models_->policy_weights(), models_->policy()),
          save_dtype_,
          [&](const std::string& dir) {
            if (lora)
              models_->lora_optimizer()->save(dir);
            else
              models_->policy().save_optimizer(dir);
          },
          state_, c_.tokenizer, start_dir_, value ? &*value : nullptr,
          lora ? &models_->lora_weights() : nullptr, c_.model},
      comm_);
  if (log_.lead) rotate_checkpoints(c_.output_dir, c_.keep_last);
  return path;
}

// A stop request counts when any rank got the signal, so that all ranks save and stop together.
bool Trainer::stop_requested_anywhere() {
  return comm_.max(int64_t{stop_requested() ? 1 : 0}) != 0;
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
      seconds_since(t_start_), c_.output_dir.c_str(), static_cast<long long>(state_.step),
      c_.metrics.c_str());
  return 0;
}

}  // namespace sbp
