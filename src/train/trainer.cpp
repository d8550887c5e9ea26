#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/process_memory.h"
#include "core/rng.h"
#include "data/packing.h"
#include "engine/engine.h"
#include "model/checkpoint_io.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/checkpoint.h"
#include "train/demo.h"
#include "train/metrics.h"
#include "train/ppo_value_model.h"
#include "train/step_objective.h"
#include "train/step_progress.h"
#include "train/stop_signal.h"
#include "train/train_data.h"

namespace sbp {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The model to start from: a Hugging Face directory with weights, or a config.json / preset
// whose weights are drawn from the seed.
struct StartingModel {
  ModelConfig cfg;
  std::string dir;  // "" when randomly initialised
};

StartingModel resolve_starting_model(const TrainConfig& c) {
  StartingModel m;
  const fs::path p(c.model);
  if (fs::is_directory(p)) {
    if (!fs::exists(p / "model.safetensors") && !fs::exists(p / "model.safetensors.index.json")) {
      throw InputError(c.where("model") + ": model: " + c.model + " has no model.safetensors (or index); "
                       "to start from random weights give its config.json instead");
    }
    m.cfg = load_config(c.model);
    m.dir = c.model;
  } else if (fs::is_regular_file(p) || has_preset(c.model)) {
    m.cfg = resolve_config(c.model);  // a config.json or a preset: random weights from the seed
  } else {
    throw InputError(c.where("model") + ": model: " + c.model + " does not exist (a Hugging Face model "
                     "directory, a config.json for random weights, or a preset name)");
  }
  return m;
}

DType export_dtype(const TrainConfig& c, const StartingModel& m) {
  if (c.save_dtype == "auto") return model_storage_dtype(m.dir, m.cfg);
  DType d = DType::F32;
  parse_dtype(c.save_dtype, &d);
  return d;
}

// The packing plan of one epoch: the RNG draws the order (and advances).
std::vector<MicroBatchPlan> plan_epoch(const std::vector<Example>& examples, const TrainConfig& c, Rng& rng) {
  const std::vector<int64_t> order = epoch_order(static_cast<int64_t>(examples.size()), c.shuffle, rng);
  return pack_examples(examples, order, c.max_tokens);
}

// The gradient's global norm before clipping, clipping it to max_norm when that is > 0.
double clip_and_measure(const ParameterSet& grads, Backend& be, double max_norm) {
  return max_norm > 0.0 ? clip_grad_norm(grads, be, max_norm) : global_grad_norm(grads, be);
}

int64_t steps_in(int64_t micro_batches, int64_t grad_accum) {
  return (micro_batches + grad_accum - 1) / grad_accum;
}

nlohmann::ordered_json memory_json(const MemoryBreakdown& b) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (int i = 0; i < kNumCategories; ++i) j[category_name(static_cast<Category>(i))] = b.bytes[static_cast<size_t>(i)];
  j["total"] = b.total();
  return j;
}

std::string fnv_hex(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A resumed run must see the same data in the same order: same identity keys, same files.
void check_resume_compatible(const TrainConfig& c, const TrainerState& s, const nlohmann::json& fingerprints,
                             const std::string& ckpt) {
  const nlohmann::json now = c.to_json();
  for (const std::string& key : resume_identity_keys()) {
    const nlohmann::json before = s.config.contains(key) ? s.config[key] : nlohmann::json();
    if (before != now[key]) {
      throw InputError(c.where(key) + ": --resume " + ckpt + ": " + key + " is " + now[key].dump() +
                       " but the checkpoint was trained with " + before.dump() +
                       " (the data order would differ; start a new run instead)");
    }
  }
  for (const char* which : {"train", "eval"}) {
    const bool had = s.data_files.contains(which), has = fingerprints.contains(which);
    if (had && has && s.data_files[which]["fnv1a64"] != fingerprints[which]["fnv1a64"]) {
      throw InputError(fingerprints[which]["path"].get<std::string>() + ": --resume " + ckpt +
                       ": the file changed since the checkpoint was written (" +
                       s.data_files[which]["bytes"].dump() + " bytes then, " +
                       fingerprints[which]["bytes"].dump() + " now)");
    }
  }
}

// The reference model's directory as configured ("" = the starting model).
std::string reference_dir(const TrainConfig& c) {
  if (c.objective == "dpo") return c.dpo.reference;
  if (c.objective == "ppo") return c.ppo.reference;
  return c.grpo.reference;
}

// PPO's value model: from ppo.value_model / the starting model / the seed on a fresh run, from
// checkpoint-N/value_model/ (weights and optimizer) on a resumed one.
std::unique_ptr<TrainedValueModel> make_value_model(const TrainConfig& c, const StartingModel& start,
                                                    const std::string& ckpt, Pool& pool, Backend& be,
                                                    const ExecConfig& exec, const AdamWConfig& optim) {
  std::unique_ptr<TrainedValueModel> v;
  if (ckpt.empty()) {
    v = std::make_unique<TrainedValueModel>(ppo_value_config(c, start.cfg), pool, be, exec, optim);
    const std::string from = init_value_weights(c, start.dir, v->config(), v->weights());
    std::printf("value model: %s\n", from.c_str());
    return v;
  }
  const std::string dir = ckpt + "/" + kValueModelDir;
  if (!fs::exists(fs::path(dir) / "config.json"))
    throw InputError(dir + ": missing (the checkpoint holds no PPO value model)");
  const ModelConfig vcfg = load_config(dir);
  if (vcfg.vocab_size != start.cfg.vocab_size)
    throw InputError(dir + "/config.json: the value model's vocab_size differs from the policy's");
  v = std::make_unique<TrainedValueModel>(vcfg, pool, be, exec, optim);
  load_value_checkpoint(ckpt, v->config(), v->weights(), v->optimizer());
  std::printf("value model: %s\n", dir.c_str());
  return v;
}

}  // namespace

int run_training(const TrainConfig& c, const std::string& resume_arg) {
  if (c.demo) {
    if (!resume_arg.empty()) throw InputError("--resume does not apply to the built-in demo");
    return run_demo(c.demo_options);
  }
  StopSignalScope stop_scope;
  const auto t_start = Clock::now();
  set_cpu_threads(c.threads);

  // Model, data, and (when resuming) the checkpoint's state.
  const StartingModel start = resolve_starting_model(c);
  const ModelConfig& cfg = start.cfg;
  std::string ckpt;
  TrainerState resumed;
  if (!resume_arg.empty()) {
    ckpt = resolve_resume_dir(resume_arg);
    resumed = read_trainer_state(ckpt);
  }
  if (c.objective == "ppo" && ckpt.empty()) check_ppo_value_model(c, cfg);
  TrainingData data = prepare_training_data(c, cfg.vocab_size);
  std::printf("data: %s\n", data.train_summary.c_str());
  if (data.chat) std::printf("chat template: %s (from %s)\n", data.chat->name().c_str(), data.chat_source.c_str());
  if (!ckpt.empty()) check_resume_compatible(c, resumed, data.fingerprints, ckpt);
  const std::vector<Example>& examples = data.train.examples;

  // The eval set is packed once, in file order.
  std::vector<PackedBatch> eval_batches;
  {
    std::vector<int64_t> order(data.eval.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    for (const MicroBatchPlan& p : pack_examples(data.eval, order, c.max_tokens))
      eval_batches.push_back(assemble_batch(data.eval, p));
  }
  if ((c.objective == "grpo" || c.objective == "ppo") && !eval_batches.empty()) {
    std::printf("note: %s has no held-out loss (offline rollouts): %s is not evaluated\n", c.objective.c_str(),
                data.eval_source.c_str());
    eval_batches.clear();
  }
  if (!eval_batches.empty())
    std::printf("eval: %s, %zu micro-batch%s\n", data.eval_source.c_str(), eval_batches.size(),
                eval_batches.size() == 1 ? "" : "es");

  // The run's length: max_steps, or the steps of `epochs` epochs (the packing of each epoch
  // depends on its order, so it is simulated with a copy of the data RNG).
  Rng data_rng(c.seed, "data-order");
  int64_t total_steps = c.max_steps;
  if (total_steps == 0) {
    Rng sim = data_rng;
    for (int64_t e = 0; e < c.epochs; ++e)
      total_steps += steps_in(static_cast<int64_t>(plan_epoch(examples, c, sim).size()), c.grad_accum);
  }
  const int64_t warmup = c.warmup_steps > 0 ? c.warmup_steps
                                            : static_cast<int64_t>(std::ceil(c.warmup_ratio * static_cast<double>(total_steps)));
  LrSchedule schedule{.kind = c.schedule, .lr = c.lr, .warmup_steps = warmup,
                      .total_steps = total_steps, .min_lr_ratio = c.min_lr_ratio};
  schedule.validate(c.where("schedule.type"));

  // Engine state: fp32 weights, gradients, AdamW moments, all in the ledger.
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  ParameterSet g(cfg, pool, Category::grads, DType::F32, true);
  const AdamWConfig optim{.beta1 = static_cast<float>(c.beta1), .beta2 = static_cast<float>(c.beta2),
                          .eps = static_cast<float>(c.eps), .weight_decay = static_cast<float>(c.weight_decay)};
  AdamW opt(cfg, pool, optim);
  ExecConfig exec = parse_mode(c.mode);
  exec.layer_chunk = c.layer_chunk;
  exec.head_chunk = c.head_chunk;
  const DType save_dtype = export_dtype(c, start);

  TrainerState state;
  state.total_steps = total_steps;
  state.config = c.to_json();
  state.config_hash = fnv_hex(state.config.dump());
  state.data_files = data.fingerprints;
  std::vector<MicroBatchPlan> plans;
  if (ckpt.empty()) {
    if (start.dir.empty()) {
      init_parameters(w, c.seed, InitStyle::hf);
      std::printf("model: %s, random weights (seed %llu)\n", c.model.c_str(), static_cast<unsigned long long>(c.seed));
    } else {
      load_weights(start.dir, cfg, w);
      std::printf("model: %s\n", start.dir.c_str());
    }
    const uint64_t* s = data_rng.state();
    state.epoch_rng = {s[0], s[1], s[2], s[3]};
    plans = plan_epoch(examples, c, data_rng);
  } else {
    load_checkpoint_tensors(ckpt, cfg, w, opt);
    state.step = resumed.step;
    state.epoch = resumed.epoch;
    state.micro_batches_done = resumed.micro_batches_done;
    state.epoch_rng = resumed.epoch_rng;
    state.tokens_seen = resumed.tokens_seen;
    data_rng.set_state(state.epoch_rng.data());
    plans = plan_epoch(examples, c, data_rng);
    if (state.micro_batches_done > static_cast<int64_t>(plans.size()))
      throw InputError(ckpt + "/trainer_state.json: data cursor " + std::to_string(state.micro_batches_done) +
                       " is past the epoch's " + std::to_string(plans.size()) + " micro-batches");
    std::printf("resuming from %s: step %lld of %lld, epoch %lld\n", ckpt.c_str(),
                static_cast<long long>(state.step), static_cast<long long>(total_steps),
                static_cast<long long>(state.epoch));
    if (resumed.total_steps != total_steps)
      std::printf("note: the run now has %lld steps (the checkpoint's run had %lld): the LR schedule follows the new length\n",
                  static_cast<long long>(total_steps), static_cast<long long>(resumed.total_steps));
  }
  Engine engine(cfg, w, be, pool, exec);
  // DPO, PPO (and GRPO with a KL term) score against a reference model: dpo/ppo/grpo.reference,
  // else the starting model — reloaded (or re-drawn from the seed), never the resumed weights.
  std::unique_ptr<ReferenceModel> reference;
  ParameterSet ref_weights;
  if (needs_reference_model(c)) {
    const std::string ref_dir = reference_dir(c);
    if (!ref_dir.empty() || !start.dir.empty()) {
      reference = ReferenceModel::load(ref_dir.empty() ? start.dir : ref_dir, be, pool, exec);
      if (reference->config().vocab_size != cfg.vocab_size)
        throw InputError(ref_dir + ": the reference model's vocab_size differs from the policy's");
    } else {
      ref_weights = ParameterSet(cfg, pool, Category::weights, DType::F32, false);
      init_parameters(ref_weights, c.seed, InitStyle::hf);
      reference = std::make_unique<ReferenceModel>(cfg, ref_weights, be, pool, exec);
    }
    std::printf("reference model: %s\n", !ref_dir.empty() ? ref_dir.c_str() : "the starting model");
  }
  std::unique_ptr<TrainedValueModel> value;
  if (c.objective == "ppo") value = make_value_model(c, start, ckpt, pool, be, exec, optim);
  StepObjective step_objective(c, reference.get(), value.get());
  std::printf("model: %s, %lld layers, d=%lld, vocab %lld, %.2fM parameters; mode %s (layer chunk %lld, head "
              "chunk %lld); %d thread%s; saves %s weights\n",
              cfg.model_type.c_str(), static_cast<long long>(cfg.num_hidden_layers),
              static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
              static_cast<double>(w.numel()) / 1e6, mode_name(exec).c_str(),
              static_cast<long long>(exec.layer_chunk), static_cast<long long>(exec.head_chunk), cpu_threads(),
              cpu_threads() == 1 ? "" : "s", dtype_name(save_dtype));
  std::printf("training: %lld steps of %lld micro-batch%s (<= %lld tokens each), lr %.3g %s, warmup %lld -> %s\n",
              static_cast<long long>(total_steps), static_cast<long long>(c.grad_accum), c.grad_accum == 1 ? "" : "es",
              static_cast<long long>(c.max_tokens), c.lr, c.schedule.c_str(), static_cast<long long>(warmup),
              c.output_dir.c_str());
  std::fflush(stdout);

  remove_stale_staging(c.output_dir);
  MetricsLog metrics(c.metrics, ckpt.empty() ? -1 : state.step);
  std::optional<ValueModelContents> value_contents;
  if (value) value_contents.emplace(ValueModelContents{value->config(), value->weights(), value->optimizer()});
  auto save = [&]() {
    const std::string path = save_checkpoint(
        c.output_dir, CheckpointContents{cfg, w, save_dtype, opt, state, c.tokenizer, start.dir,
                                         value_contents ? &*value_contents : nullptr});
    rotate_checkpoints(c.output_dir, c.keep_last);
    return path;
  };

  if (state.step >= total_steps) {
    std::printf("nothing to do: the checkpoint is at step %lld of %lld\n", static_cast<long long>(state.step),
                static_cast<long long>(total_steps));
    return 0;
  }
  if (stop_requested()) {
    std::fprintf(stderr, "streambp: interrupted before the first step; nothing saved\n");
    return kInterruptedExitCode;
  }
  double last_eval = std::nan("");
  if (ckpt.empty() && !eval_batches.empty()) {
    last_eval = step_objective.evaluate(engine, eval_batches);
    metrics.write(nlohmann::ordered_json{{"step", 0}, {"eval_loss", last_eval}});
    std::printf("eval loss before training: %.4f\n", last_eval);
    std::fflush(stdout);
  }

  // This invocation ends at stop_at: the run's end, or earlier with stop_after_steps.
  const int64_t stop_at = c.stop_after_steps > 0 ? std::min(total_steps, state.step + c.stop_after_steps) : total_steps;
  StepProgress progress(state.step, total_steps);
  int64_t last_saved = -1;
  double last_loss = 0.0;
  while (state.step < stop_at) {
    const auto t_step = Clock::now();
    if (state.micro_batches_done >= static_cast<int64_t>(plans.size())) {
      ++state.epoch;
      const uint64_t* s = data_rng.state();
      state.epoch_rng = {s[0], s[1], s[2], s[3]};
      plans = plan_epoch(examples, c, data_rng);
      state.micro_batches_done = 0;
    }
    const int64_t k = std::min<int64_t>(c.grad_accum, static_cast<int64_t>(plans.size()) - state.micro_batches_done);
    std::vector<PackedBatch> batches;
    double normalizer = 0.0;  // trained tokens of the whole step
    int64_t tokens = 0;
    for (int64_t i = 0; i < k; ++i) {
      batches.push_back(assemble_batch(examples, plans[static_cast<size_t>(state.micro_batches_done + i)]));
      batches.back().batch.validate(cfg.vocab_size, "micro-batch");
      normalizer += batches.back().batch.loss_weight_sum();
      tokens += batches.back().batch.size();
    }
    const double lr = schedule.at(state.step + 1);
    for (size_t i = 0; i < g.size(); ++i) be.fill(g.tensor(i), 0.0f);
    if (value)
      for (size_t i = 0; i < value->grads().size(); ++i) be.fill(value->grads().tensor(i), 0.0f);
    ledger.reset_peak();
    const StepObjective::Result result = step_objective.run(engine, batches, g);
    const double loss = result.loss;
    const double grad_norm = clip_and_measure(g, be, c.max_grad_norm);
    opt.step(w, g, be, static_cast<float>(lr));
    double value_grad_norm = 0.0;  // PPO: the value model is clipped and stepped on its own
    if (value) {
      value_grad_norm = clip_and_measure(value->grads(), be, c.max_grad_norm);
      value->optimizer().step(value->weights(), value->grads(), be, static_cast<float>(lr));
    }
    const MemoryBreakdown peak = ledger.peak_breakdown();
    state.micro_batches_done += k;
    state.tokens_seen += tokens;
    ++state.step;
    last_loss = loss;

    const bool eval_now = !eval_batches.empty() &&
                          ((c.eval_every > 0 && state.step % c.eval_every == 0) || state.step == total_steps);
    if (eval_now) last_eval = step_objective.evaluate(engine, eval_batches);
    const double step_s = seconds_since(t_step);
    nlohmann::ordered_json line = {
        {"step", state.step},
        {"epoch", static_cast<double>(state.epoch) + static_cast<double>(state.micro_batches_done) /
                                                         static_cast<double>(plans.size())},
        {"loss", loss},
        {"lr", lr},
        {"grad_norm", grad_norm},
        {"tokens", tokens},
        {"loss_tokens", static_cast<int64_t>(normalizer)},
        {"micro_batches", k},
        {"tokens_per_s", static_cast<double>(tokens) / std::max(step_s, 1e-9)},
        {"step_time_s", step_s},
        {"elapsed_s", seconds_since(t_start)},
        {"peak_memory_bytes", memory_json(peak)},
        {"peak_rss_bytes", peak_rss_bytes()}};
    if (value) line["value_grad_norm"] = value_grad_norm;
    for (const auto& [name, x] : result.metrics) line[name] = x;
    if (eval_now) line["eval_loss"] = last_eval;
    metrics.write(line);

    char fields[200];
    std::snprintf(fields, sizeof fields, "loss %.4f%s | lr %.2e | grad %.3f | %.0f tok/s", loss,
                  std::isnan(last_eval) ? "" : (" | eval " + std::to_string(last_eval).substr(0, 6)).c_str(), lr,
                  grad_norm, static_cast<double>(tokens) / std::max(step_s, 1e-9));
    const bool stop = stop_requested();
    const bool save_now = (c.save_every > 0 && state.step % c.save_every == 0) || state.step == stop_at || stop;
    progress.update(state.step, fields, eval_now || save_now);
    if (save_now) {
      const std::string path = save();
      last_saved = state.step;
      std::fprintf(stderr, "saved %s\n", path.c_str());
    }
    if (stop) {
      progress.finish();
      std::fprintf(stderr, "streambp: stopped by signal %d after step %lld; resume with --resume %s\n",
                   stop_signal_number(), static_cast<long long>(state.step), c.output_dir.c_str());
      return kInterruptedExitCode;
    }
  }
  progress.finish();
  if (last_saved != state.step) save();
  if (state.step < total_steps) {
    std::printf("stopped after %lld steps (stop_after_steps), at step %lld of %lld; continue with --resume %s\n",
                static_cast<long long>(c.stop_after_steps), static_cast<long long>(state.step),
                static_cast<long long>(total_steps), c.output_dir.c_str());
    return 0;
  }
  std::printf("done: %lld steps, last loss %.4f%s, %.1f s; checkpoint %s/checkpoint-%lld, metrics %s\n",
              static_cast<long long>(state.step), last_loss,
              std::isnan(last_eval) ? "" : (", eval loss " + std::to_string(last_eval)).c_str(),
              seconds_since(t_start), c.output_dir.c_str(), static_cast<long long>(state.step), c.metrics.c_str());
  return 0;
}

}  // namespace sbp
