#include "train/demo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "backend/backend_factory.h"
#include "backend/cpu_threads.h"
#include "core/error.h"
#include "model/checkpoint_io.h"
#include "optim/lr_schedule.h"
#include "plan/plan_step.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "train/step_progress.h"
#include "train/training_loop.h"
#include "train/retrieval_task.h"

namespace sbp {

namespace {

ModelConfig demo_model(const DemoOptions& o, int64_t vocab) {
  ModelConfig c = preset_config("tiny-qwen3");
  c.hidden_size = o.hidden;
  c.intermediate_size = 3 * o.hidden;
  c.set_num_layers(o.layers);
  c.num_attention_heads = o.heads;
  c.num_key_value_heads = o.heads;
  c.head_dim = o.hidden / o.heads;
  c.vocab_size = vocab;
  c.max_position_embeddings = std::max<int64_t>(o.seq_len, 4096);
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.torch_dtype = "float32";
  c.validate("demo model");
  return c;
}

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;        // over every query
  double first_accuracy = 0.0;  // over first queries of a key: answer only in the dictionary
};

EvalResult evaluate(StepRunner& runner, const std::vector<RetrievalTask::Sample>& set) {
  EvalResult r;
  int64_t n = 0, correct = 0, n_first = 0, correct_first = 0;
  for (const RetrievalTask::Sample& smp : set) {
    const Engine::TokenScores s = runner.score(smp.batch);
    const std::vector<int32_t> targets = smp.batch.targets();
    auto right = [&](int64_t row) {
      return s.argmax[static_cast<size_t>(row)] == targets[static_cast<size_t>(row)];
    };
    for (int64_t row : smp.scored_rows) {
      r.loss -= s.logp[static_cast<size_t>(row)];
      correct += right(row);
      ++n;
    }
    for (int64_t row : smp.first_rows) {
      correct_first += right(row);
      ++n_first;
    }
  }
  r.loss /= static_cast<double>(std::max<int64_t>(n, 1));
  r.accuracy = static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(n, 1));
  r.first_accuracy =
      static_cast<double>(correct_first) / static_cast<double>(std::max<int64_t>(n_first, 1));
  return r;
}

// The demo's side of the loop: the task's sequences, a smoothed loss, accuracy when due.
struct DemoSteps : StepHooks {
  DemoSteps(const RetrievalTask& t, StepRunner& r, const std::vector<RetrievalTask::Sample>& e,
            const DemoOptions& opts, const EvalResult& first)
      : task(t), runner(r), eval_set(e), o(opts), data_rng(o.seed, "demo-train"),
        progress(0, o.steps), last(first), loss_ema(std::log(static_cast<double>(t.num_values))) {}

  StepBatches next_batches(int64_t) override {
    MicroBatch mb;
    mb.batch = task.sample(data_rng).batch;
    return StepBatches::whole({std::move(mb)});
  }
  bool accept(const StepRecord&) override { return true; }
  bool after_step(const StepRecord& s) override {
    loss_ema = s.step == 1 ? s.result.loss : 0.9 * loss_ema + 0.1 * s.result.loss;
    const bool eval_now = s.step % o.eval_every == 0 || s.step == o.steps;
    if (eval_now) last = evaluate(runner, eval_set);
    char fields[200];
    std::snprintf(fields, sizeof fields,
                  "loss %.3f | eval acc %5.1f%% long-range %5.1f%% | grad %.2f | lr %.1e", loss_ema,
                  100.0 * last.accuracy, 100.0 * last.first_accuracy, s.grad_norm, s.lr);
    progress.update(s.step, fields, eval_now);
    return true;
  }

  const RetrievalTask& task;
  StepRunner& runner;
  const std::vector<RetrievalTask::Sample>& eval_set;
  const DemoOptions& o;
  Rng data_rng;
  StepProgress progress;
  EvalResult last;
  double loss_ema;
};

}  // namespace

int run_demo(const DemoOptions& o) {
  set_cpu_threads(o.threads);
  RetrievalTask task;
  task.seq_len = o.seq_len;
  task.num_pairs = o.num_pairs;
  task.num_queries = o.num_queries;
  task.num_keys = o.num_pairs;  // every key of the alphabet is in the dictionary
  task.num_filler = o.num_filler;
  const ModelConfig cfg = demo_model(o, task.vocab_size());
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = o.layer_chunk;
  exec.head_chunk = o.head_chunk;

  Ledger ledger;
  const std::unique_ptr<Backend> backend = make_backend(BackendSpec{});
  Backend& be = *backend;
  Pool pool(ledger, be);
  // An SFT run's models (weights, gradients, AdamW moments) and its step runner, as `train`
  // builds them.
  const ObjectiveSetup sft;
  const AdamWConfig optim{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f};
  ModelSet models(sft, cfg, pool, be, ModelSetOptions{.optim = &optim});
  ParameterSet& w = models.policy_weights();
  init_parameters(w, o.seed, InitStyle::hf);
  LrSchedule lr{
      .kind = ScheduleKind::constant, .lr = o.lr, .warmup_steps = o.warmup, .total_steps = o.steps};
  StepRunner runner(sft, models.views(), be, pool, exec);

  Rng eval_rng(o.seed, "demo-eval");
  std::vector<RetrievalTask::Sample> eval_set;
  for (int64_t i = 0; i < o.eval_sequences; ++i) eval_set.push_back(task.sample(eval_rng));

  std::printf(
      "streambp demo: key->value retrieval at T=%lld: %lld pairs at the start, %lld "
      "queries at the end;\n  a key's first query is >= %lld tokens after its answer\n",
      static_cast<long long>(o.seq_len), static_cast<long long>(task.num_pairs),
      static_cast<long long>(task.num_queries),
      static_cast<long long>(task.min_retrieval_distance()));
  std::printf(
      "model: qwen3-style, %lld layers, d=%lld, %lld heads (%lld kv), vocab %lld, "
      "%.2fM parameters; mode stream (layer chunk %lld, head chunk %lld), %d threads\n",
      static_cast<long long>(cfg.num_hidden_layers), static_cast<long long>(cfg.hidden_size),
      static_cast<long long>(cfg.num_attention_heads),
      static_cast<long long>(cfg.num_key_value_heads), static_cast<long long>(cfg.vocab_size),
      static_cast<double>(w.numel()) / 1e6, static_cast<long long>(exec.layer_chunk),
      static_cast<long long>(exec.head_chunk), cpu_threads());
  const EvalResult first = evaluate(runner, eval_set);
  std::printf(
      "before training: eval loss %.3f, accuracy %.1f%%, long-range %.1f%% (chance %.1f%%)\n",
      first.loss, 100.0 * first.accuracy, 100.0 * first.first_accuracy,
      100.0 / static_cast<double>(task.num_values));
  std::fflush(stdout);

  ledger.reset_peak();
  // The trainer's loop (train/training_loop.h), on a fresh sequence of the task each step.
  DemoSteps hooks(task, runner, eval_set, o, first);
  TrainingLoop loop(models, runner, be, lr, o.clip);
  loop.run(0, o.steps, hooks);
  hooks.progress.finish();
  const EvalResult& last = hooks.last;
  std::printf(
      "after %lld steps: eval loss %.3f (from %.3f), accuracy %.1f%% (from %.1f%%), "
      "long-range %.1f%% (from %.1f%%)\n",
      static_cast<long long>(o.steps), last.loss, first.loss, 100.0 * last.accuracy,
      100.0 * first.accuracy, 100.0 * last.first_accuracy, 100.0 * first.first_accuracy);

  save_model_dir(o.out, cfg, w, DType::F32);
  std::printf("saved a Hugging Face checkpoint to %s/\n", o.out.c_str());

  // Memory: what this run's steps held beyond weights, gradients and optimizer state, next to
  // what gradient checkpointing needs for the same step (planned by shape-only execution of
  // the same engine code).
  const MemoryBreakdown& pk = ledger.peak_breakdown();
  const int64_t fixed = pk[Category::weights] + pk[Category::grads] + pk[Category::optimizer];
  const Batch probe = task.sample(hooks.data_rng).batch;
  const PlannedStep plan_stream = plan_sft_step(cfg, exec, probe, DType::F32, true);
  const PlannedStep plan_ckpt =
      plan_sft_step(cfg, parse_mode("checkpoint"), probe, DType::F32, true);
  const PlannedStep plan_base = plan_sft_step(cfg, parse_mode("base"), probe, DType::F32, true);
  auto act = [&](const PlannedStep& p) { return p.peak_bytes - fixed; };
  std::printf("\nmemory per step at T=%lld (ledger, beyond %s of weights+grads+AdamW):\n",
              static_cast<long long>(o.seq_len), format_bytes(fixed).c_str());
  std::printf("  stream (this run, measured) %10s\n", format_bytes(ledger.peak() - fixed).c_str());
  std::printf("  stream (planned)            %10s\n", format_bytes(act(plan_stream)).c_str());
  std::printf("  checkpoint (planned)        %10s  (%.1fx)\n", format_bytes(act(plan_ckpt)).c_str(),
              static_cast<double>(act(plan_ckpt)) / static_cast<double>(ledger.peak() - fixed));
  std::printf("  base, no checkpointing      %10s  (%.1fx)\n", format_bytes(act(plan_base)).c_str(),
              static_cast<double>(act(plan_base)) / static_cast<double>(ledger.peak() - fixed));
  return 0;
}

}  // namespace sbp
