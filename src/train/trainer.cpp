#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/process_memory.h"
#include "core/rng.h"
#include "data/packing.h"
#include "dist/data_parallel.h"
#include "engine/engine.h"
#include "model/checkpoint_io.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/auto_chunks.h"
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

// Only rank 0 speaks: notes and progress would otherwise appear once per rank. (Errors are
// thrown, and reported, on every rank.)
struct Log {
  bool lead = true;
  void out(const char* fmt, ...) const __attribute__((format(printf, 2, 3))) {
    if (!lead) return;
    va_list a;
    va_start(a, fmt);
    std::vprintf(fmt, a);
    va_end(a);
  }
  void err(const char* fmt, ...) const __attribute__((format(printf, 2, 3))) {
    if (!lead) return;
    va_list a;
    va_start(a, fmt);
    std::vfprintf(stderr, fmt, a);
    va_end(a);
  }
};

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

// A resumed run must see the same data in the same order: same identity keys, same files. On
// another number of ranks the data order is the same but a step groups ranks x grad_accum
// micro-batches of it: the same product continues exactly, another one is said.
void check_resume_compatible(const TrainConfig& c, const TrainerState& s, const nlohmann::json& fingerprints,
                             const std::string& ckpt, int ranks, const Log& log) {
  const nlohmann::json now = c.to_json();
  for (const std::string& key : resume_identity_keys()) {
    const nlohmann::json before = s.config.contains(key) ? s.config[key] : nlohmann::json();
    if (key == "grad_accum" && s.ranks != ranks && before.is_number_integer()) {
      const int64_t then = before.get<int64_t>() * s.ranks, per_step = c.grad_accum * ranks;
      if (then != per_step)
        log.out("note: a step now takes %lld micro-batches (%d ranks x grad_accum %lld), the checkpoint's run "
                "took %lld (%lld ranks x %lld): the data order is the same, grouped into steps differently\n",
                static_cast<long long>(per_step), ranks, static_cast<long long>(c.grad_accum),
                static_cast<long long>(then), static_cast<long long>(s.ranks),
                static_cast<long long>(before.get<int64_t>()));
      continue;
    }
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
                                                    const ExecConfig& exec, const AdamWConfig& optim,
                                                    Communicator& comm, const Log& log) {
  std::unique_ptr<TrainedValueModel> v;
  if (ckpt.empty()) {
    v = std::make_unique<TrainedValueModel>(ppo_value_config(c, start.cfg), pool, be, exec, optim, comm,
                                            c.dist.zero);
    const std::string from = init_value_weights(c, start.dir, v->config(), v->weights());
    log.out("value model: %s\n", from.c_str());
    return v;
  }
  const std::string dir = ckpt + "/" + kValueModelDir;
  if (!fs::exists(fs::path(dir) / "config.json"))
    throw InputError(dir + ": missing (the checkpoint holds no PPO value model)");
  const ModelConfig vcfg = load_config(dir);
  if (vcfg.vocab_size != start.cfg.vocab_size)
    throw InputError(dir + "/config.json: the value model's vocab_size differs from the policy's");
  v = std::make_unique<TrainedValueModel>(vcfg, pool, be, exec, optim, comm, c.dist.zero);
  load_value_checkpoint_weights(ckpt, v->config(), v->weights());
  v->parallel().load_optimizer(dir);
  log.out("value model: %s\n", dir.c_str());
  return v;
}

}  // namespace

int run_training(const TrainConfig& c, const std::string& resume_arg) {
  return run_training(c, resume_arg, single_process());
}

int run_training(const TrainConfig& c, const std::string& resume_arg, Communicator& comm) {
  const int ranks = comm.size();
  const Log log{comm.rank() == 0};
  if (c.demo) {
    if (ranks > 1) throw InputError("the built-in demo runs on one process; give a config to train with mpirun");
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
  log.out("data: %s\n", data.train_summary.c_str());
  if (data.chat) log.out("chat template: %s (from %s)\n", data.chat->name().c_str(), data.chat_source.c_str());
  if (!ckpt.empty()) check_resume_compatible(c, resumed, data.fingerprints, ckpt, ranks, log);
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
    log.out("note: %s has no held-out loss (offline rollouts): %s is not evaluated\n", c.objective.c_str(),
                data.eval_source.c_str());
    eval_batches.clear();
  }
  if (!eval_batches.empty())
    log.out("eval: %s, %zu micro-batch%s\n", data.eval_source.c_str(), eval_batches.size(),
                eval_batches.size() == 1 ? "" : "es");

  // The run's length: max_steps, or the steps of `epochs` epochs (the packing of each epoch
  // depends on its order, so it is simulated with a copy of the data RNG). Every rank builds
  // the same plan; a step takes ranks x grad_accum of its micro-batches.
  const int64_t per_step = c.grad_accum * ranks;
  Rng data_rng(c.seed, "data-order");
  int64_t total_steps = c.max_steps;
  if (total_steps == 0) {
    Rng sim = data_rng;
    for (int64_t e = 0; e < c.epochs; ++e)
      total_steps += steps_in(static_cast<int64_t>(plan_epoch(examples, c, sim).size()), per_step);
  }
  const int64_t warmup = c.warmup_steps > 0 ? c.warmup_steps
                                            : static_cast<int64_t>(std::ceil(c.warmup_ratio * static_cast<double>(total_steps)));
  LrSchedule schedule{.kind = c.schedule, .lr = c.lr, .warmup_steps = warmup,
                      .total_steps = total_steps, .min_lr_ratio = c.min_lr_ratio};
  schedule.validate(c.where("schedule.type"));

  // Engine state: fp32 weights, gradients, AdamW moments, all in the ledger; gradients and
  // moments as the ranks and dist.zero divide them (dist/data_parallel.h).
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  const AdamWConfig optim{.beta1 = static_cast<float>(c.beta1), .beta2 = static_cast<float>(c.beta2),
                          .eps = static_cast<float>(c.eps), .weight_decay = static_cast<float>(c.weight_decay)};
  DataParallel policy(comm, c.dist.zero, cfg, ModelHead::lm, pool, be, &optim);
  const ParameterSet& g = policy.grads();
  ExecConfig exec = parse_mode(c.mode);
  exec.layer_chunk = c.layer_chunk;
  exec.head_chunk = c.head_chunk;
  if (c.layer_chunk == 0 || c.head_chunk == 0) {
    const ResolvedChunks rc = resolve_auto_chunks(c, cfg, exec, ranks);
    exec.layer_chunk = rc.layer_chunk;
    exec.head_chunk = rc.head_chunk;
    log.out("auto chunks: layer %lld, head %lld: the planned step peaks at %.1f MiB of the %.1f MiB budget\n",
                static_cast<long long>(rc.layer_chunk), static_cast<long long>(rc.head_chunk),
                static_cast<double>(rc.planned_peak) / 1048576.0, static_cast<double>(rc.budget) / 1048576.0);
  }
  const DType save_dtype = export_dtype(c, start);

  TrainerState state;
  state.total_steps = total_steps;
  state.config = c.to_json();
  state.config_hash = fnv_hex(state.config.dump());
  state.data_files = data.fingerprints;
  state.ranks = ranks;
  std::vector<MicroBatchPlan> plans;
  if (ckpt.empty()) {
    if (start.dir.empty()) {
      init_parameters(w, c.seed, InitStyle::hf);
      log.out("model: %s, random weights (seed %llu)\n", c.model.c_str(), static_cast<unsigned long long>(c.seed));
    } else {
      load_weights(start.dir, cfg, w);
      log.out("model: %s\n", start.dir.c_str());
    }
    const uint64_t* s = data_rng.state();
    state.epoch_rng = {s[0], s[1], s[2], s[3]};
    plans = plan_epoch(examples, c, data_rng);
  } else {
    load_checkpoint_weights(ckpt, cfg, w);
    policy.load_optimizer(ckpt);
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
    log.out("resuming from %s: step %lld of %lld, epoch %lld\n", ckpt.c_str(),
                static_cast<long long>(state.step), static_cast<long long>(total_steps),
                static_cast<long long>(state.epoch));
    if (resumed.total_steps != total_steps)
      log.out("note: the run now has %lld steps (the checkpoint's run had %lld): the LR schedule follows the new length\n",
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
    log.out("reference model: %s\n", !ref_dir.empty() ? ref_dir.c_str() : "the starting model");
  }
  std::unique_ptr<TrainedValueModel> value;
  if (c.objective == "ppo") value = make_value_model(c, start, ckpt, pool, be, exec, optim, comm, log);
  StepObjective step_objective(c, reference.get(), value.get(), comm);
  log.out("model: %s, %lld layers, d=%lld, vocab %lld, %.2fM parameters; mode %s (layer chunk %lld, head "
              "chunk %lld); %d thread%s; saves %s weights\n",
              cfg.model_type.c_str(), static_cast<long long>(cfg.num_hidden_layers),
              static_cast<long long>(cfg.hidden_size), static_cast<long long>(cfg.vocab_size),
              static_cast<double>(w.numel()) / 1e6, mode_name(exec).c_str(),
              static_cast<long long>(exec.layer_chunk), static_cast<long long>(exec.head_chunk), cpu_threads(),
              cpu_threads() == 1 ? "" : "s", dtype_name(save_dtype));
  if (ranks > 1)
    log.out("data parallel: %d ranks, zero %d, %lld micro-batch%s per rank per step\n", ranks, policy.zero(),
            static_cast<long long>(c.grad_accum), c.grad_accum == 1 ? "" : "es");
  log.out("training: %lld steps of %lld micro-batch%s (<= %lld tokens each), lr %.3g %s, warmup %lld -> %s\n",
              static_cast<long long>(total_steps), static_cast<long long>(per_step), per_step == 1 ? "" : "es",
              static_cast<long long>(c.max_tokens), c.lr, c.schedule.c_str(), static_cast<long long>(warmup),
              c.output_dir.c_str());
  std::fflush(stdout);

  // Rank 0 writes the metrics and the checkpoints (each rank its optimizer shards).
  std::optional<MetricsLog> metrics;
  if (log.lead) {
    remove_stale_staging(c.output_dir);
    metrics.emplace(c.metrics, ckpt.empty() ? -1 : state.step);
  }
  std::optional<ValueModelContents> value_contents;
  if (value)
    value_contents.emplace(ValueModelContents{value->config(), value->weights(),
                                              [&](const std::string& dir) { value->parallel().save_optimizer(dir); }});
  auto save = [&]() {
    const std::string path = save_checkpoint(
        c.output_dir,
        CheckpointContents{cfg, w, save_dtype, [&](const std::string& dir) { policy.save_optimizer(dir); }, state,
                           c.tokenizer, start.dir, value_contents ? &*value_contents : nullptr},
        comm);
    if (log.lead) rotate_checkpoints(c.output_dir, c.keep_last);
    return path;
  };
  // A stop request counts when any rank got the signal, so that all ranks save and stop together.
  auto stop_now = [&]() { return comm.max(int64_t{stop_requested() ? 1 : 0}) != 0; };

  if (state.step >= total_steps) {
    log.out("nothing to do: the checkpoint is at step %lld of %lld\n", static_cast<long long>(state.step),
                static_cast<long long>(total_steps));
    return 0;
  }
  if (stop_now()) {
    log.err("streambp: interrupted before the first step; nothing saved\n");
    return kInterruptedExitCode;
  }
  double last_eval = std::nan("");
  if (ckpt.empty() && !eval_batches.empty()) {
    last_eval = step_objective.evaluate(engine, eval_batches);
    if (metrics) metrics->write(nlohmann::ordered_json{{"step", 0}, {"eval_loss", last_eval}});
    log.out("eval loss before training: %.4f\n", last_eval);
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
    // The step's micro-batches: micro-batch i of it goes to rank i % ranks (step_objective.h).
    const int64_t k = std::min<int64_t>(per_step, static_cast<int64_t>(plans.size()) - state.micro_batches_done);
    StepPart part;
    part.step_micro_batches = k;
    part.slots = (k + ranks - 1) / ranks;
    double normalizer = 0.0;  // trained tokens of the whole step
    int64_t tokens = 0;
    for (int64_t i = comm.rank(); i < k; i += ranks) {
      part.batches.push_back(assemble_batch(examples, plans[static_cast<size_t>(state.micro_batches_done + i)]));
      part.index.push_back(i);
      part.batches.back().batch.validate(cfg.vocab_size, "micro-batch");
      normalizer += part.batches.back().batch.loss_weight_sum();
      tokens += part.batches.back().batch.size();
    }
    normalizer = comm.sum(normalizer);
    tokens = comm.sum(tokens);
    const double lr = schedule.at(state.step + 1);
    policy.begin_step(part.slots);
    if (value) value->parallel().begin_step(part.slots);
    ledger.reset_peak();
    const StepObjective::Result result = step_objective.run(engine, part, g, &policy);
    const double loss = result.loss;
    const double grad_norm = policy.clip(c.max_grad_norm);
    policy.update(w, static_cast<float>(lr));
    double value_grad_norm = 0.0;  // PPO: the value model is clipped and stepped on its own
    if (value) {
      value_grad_norm = value->parallel().clip(c.max_grad_norm);
      value->parallel().update(value->weights(), static_cast<float>(lr));
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
    if (ranks > 1) {
      // peak_memory_bytes above is rank 0's ledger; the collectives are every rank's.
      const int64_t peak_max = comm.max(ledger.peak());
      line["dist/ranks"] = ranks;
      line["dist/zero"] = policy.zero();
      line["dist/grad_reductions"] = policy.counters().reductions;
      line["dist/grad_reduced_bytes"] = policy.counters().reduced_bytes;
      line["dist/param_allgathers"] = policy.counters().gathers;
      line["dist/grad_reductions_done_during_backward"] = policy.counters().done_during_backward;
      if (value) line["dist/value_grad_reductions"] = value->parallel().counters().reductions;
      line["dist/peak_memory_max_rank"] = peak_max;
    }
    if (metrics) metrics->write(line);

    char fields[200];
    std::snprintf(fields, sizeof fields, "loss %.4f%s | lr %.2e | grad %.3f | %.0f tok/s", loss,
                  std::isnan(last_eval) ? "" : (" | eval " + std::to_string(last_eval).substr(0, 6)).c_str(), lr,
                  grad_norm, static_cast<double>(tokens) / std::max(step_s, 1e-9));
    const bool stop = stop_now();
    const bool save_now = (c.save_every > 0 && state.step % c.save_every == 0) || state.step == stop_at || stop;
    if (log.lead) progress.update(state.step, fields, eval_now || save_now);
    if (save_now) {
      const std::string path = save();
      last_saved = state.step;
      log.err("saved %s\n", path.c_str());
    }
    if (stop) {
      if (log.lead) progress.finish();
      const std::string by = stop_signal_number() != 0 ? "signal " + std::to_string(stop_signal_number())
                                                       : std::string("a signal to another rank");
      log.err("streambp: stopped by %s after step %lld; resume with --resume %s\n", by.c_str(),
              static_cast<long long>(state.step), c.output_dir.c_str());
      return kInterruptedExitCode;
    }
  }
  if (log.lead) progress.finish();
  if (last_saved != state.step) save();
  if (state.step < total_steps) {
    log.out("stopped after %lld steps (stop_after_steps), at step %lld of %lld; continue with --resume %s\n",
                static_cast<long long>(c.stop_after_steps), static_cast<long long>(state.step),
                static_cast<long long>(total_steps), c.output_dir.c_str());
    return 0;
  }
  log.out("done: %lld steps, last loss %.4f%s, %.1f s; checkpoint %s/checkpoint-%lld, metrics %s\n",
              static_cast<long long>(state.step), last_loss,
              std::isnan(last_eval) ? "" : (", eval loss " + std::to_string(last_eval)).c_str(),
              seconds_since(t_start), c.output_dir.c_str(), static_cast<long long>(state.step), c.metrics.c_str());
  return 0;
}

}  // namespace sbp
