#include "train/run_metrics.h"

#include <algorithm>

#include "core/process_memory.h"

namespace sbp {

namespace {

nlohmann::ordered_json memory_json(const MemoryBreakdown& b) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (int i = 0; i < kNumCategories; ++i)
    j[category_name(static_cast<Category>(i))] = b.bytes[static_cast<size_t>(i)];
  j["total"] = b.total();
  return j;
}

}  // namespace

void RunMetrics::open_metrics(const std::string& path, int64_t resumed_step) {
  metrics_.emplace(path, resumed_step);
}

void RunMetrics::open_completions(const std::string& path, int64_t resumed_step) {
  completions_.emplace(path, resumed_step);
}

double RunMetrics::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - t_start_).count();
}

void RunMetrics::write_eval(int64_t step, double eval_loss) {
  if (!metrics_) return;
  const nlohmann::ordered_json line{{"step", step}, {"eval_loss", eval_loss}};
  metrics_->write(line);
  if (listener_) listener_(line);
}

void RunMetrics::write_step(const StepRecord& s, const TrainerState& state, double epoch,
                            double step_s, const Ledger& ledger, const Ledger* host_ledger,
                            ModelSet& models,
                            const OnlineRollouts* online, std::optional<double> eval_loss) {
  const int64_t peak_max = comm_.size() > 1 ? comm_.max(ledger.peak()) : ledger.peak();
  if (!metrics_) return;
  const StepResult& r = s.result;
  nlohmann::ordered_json line = {
      {"step", state.step},
      {"epoch", epoch},
      {"loss", r.loss},
      {"lr", s.lr},
      {"grad_norm", s.grad_norm},
      {"tokens", r.tokens},
      {"loss_tokens", static_cast<int64_t>(r.loss_tokens)},
      {"micro_batches", s.micro_batches},
      {"tokens_per_s", static_cast<double>(r.tokens) / std::max(step_s, 1e-9)},
      {"step_time_s", step_s},
      {"elapsed_s", elapsed_s()},
      {"peak_memory_bytes", memory_json(ledger.peak_breakdown())},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"update_time_s", s.update_s}};
  // offload: what waited in host memory (checkpoints, the optimizer), at the host's peak.
  if (host_ledger) line["peak_host_memory_bytes"] = memory_json(host_ledger->peak_breakdown());
  if (models.has_value()) line["value_grad_norm"] = s.value_grad_norm;
  if (state.skipped_steps > 0) line["skipped_steps"] = state.skipped_steps;
  for (const auto& [name, x] : r.metrics) line[name] = x;
  if (eval_loss) line["eval_loss"] = *eval_loss;
  if (online && online->sampled_last()) {
    // The batch of rollouts this step sampled (steps that reuse a batch repeat none of it).
    const RolloutStats& st = online->stats();
    for (size_t k = 0; k < st.reward_names.size(); ++k) {
      line["rewards/" + st.reward_names[k] + "/mean"] = st.reward_mean[k];
      line["rewards/" + st.reward_names[k] + "/std"] = st.reward_std[k];
    }
    line["reward"] = st.reward_total_mean;
    line["reward_std"] = st.reward_total_std;
    line["completions/mean_length"] = st.completion_length_mean;
    line["completions/max_length"] = st.completion_length_max;
    line["completions/truncated_fraction"] = st.truncated_fraction;
    line["frac_reward_zero_std"] = st.zero_std_groups;
    line["generation/tokens"] = st.generated_tokens;
    line["generation/seconds"] = st.generation_s;
    line["generation/tokens_per_s"] =
        static_cast<double>(st.generated_tokens) / std::max(st.generation_s, 1e-9);
    line["train/tokens_per_s"] =
        static_cast<double>(r.tokens) / std::max(step_s - st.generation_s, 1e-9);
  }
  if (comm_.size() > 1) {
    // peak_memory_bytes above is rank 0's ledger; the collectives are every rank's.
    line["dist/ranks"] = comm_.size();
    if (models.has_lora()) {
      // The adapters' gradients: one all-reduce of all of them per step (dist/lora_grads.h).
      line["dist/zero"] = 0;
      line["dist/grad_reductions"] = 1;
      line["dist/grad_reduced_bytes"] = 4 * models.lora_grads().numel();
      line["dist/param_allgathers"] = 0;
    } else {
      const DataParallel::Counters& n = models.policy().counters();
      line["dist/zero"] = models.policy().zero();
      line["dist/grad_reductions"] = n.reductions;
      line["dist/grad_reduced_bytes"] = n.reduced_bytes;
      line["dist/param_allgathers"] = n.gathers;
      line["dist/grad_reductions_done_during_backward"] = n.done_during_backward;
    }
    if (models.has_value())
      line["dist/value_grad_reductions"] = models.value().counters().reductions;
    line["dist/peak_memory_max_rank"] = peak_max;
  }
  metrics_->write(line);
  if (listener_) listener_(line);
}

void RunMetrics::log_completions(int64_t step, const OnlineRollouts& online) {
  if (!completions_) return;
  const std::vector<RolloutSample>& samples = online.samples();
  const RolloutStats& st = online.stats();
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (size_t i = 0; i < samples.size();) {
    const int64_t p = samples[i].prompt;
    if (groups.size() == 4) break;
    nlohmann::ordered_json completions = nlohmann::ordered_json::array();
    for (; i < samples.size() && samples[i].prompt == p; ++i) {
      nlohmann::ordered_json rewards = nlohmann::ordered_json::object();
      for (size_t k = 0; k < st.reward_names.size(); ++k)
        rewards[st.reward_names[k]] = samples[i].per_reward[k];
      completions.push_back({{"completion", online.completion_text(samples[i])},
                             {"tokens", samples[i].ids.size()},
                             {"truncated", samples[i].truncated},
                             {"reward", samples[i].reward},
                             {"rewards", rewards}});
    }
    const PromptRecord& rec = online.prompt(p);
    groups.push_back({{"prompt", rec.text},
                      {"record", rec.where},
                      {"fields", rec.fields},
                      {"completions", completions}});
  }
  completions_->write({{"step", step}, {"prompts", groups}});
}

}  // namespace sbp
