// streambp bench: time and memory of one training step of an objective (sft, dpo, grpo, ppo)
// per (mode, T), through the step runner `train` runs (step/step_runner.h), with the machine's
// sgemm speed measured in the same run as the yardstick for achieved GFLOP/s. For DPO, GRPO
// (beta != 0) and PPO the step includes the reference model's forward, on its own copy of the
// weights (a real run holds two models); PPO's step includes its rollout (old log-probs,
// reference log-probs and values, before any backward), as in training.
// --profile: the measured steps' time split by kernel family (backend/op_profile.h), each
// family's GFLOP/s against sgemm (the GPU's bf16 GEMM probe on cuda) or, on the CPU, GB/s against
// the copy bandwidth, both measured in the run. On a GPU every profiled op is synchronised
// before and after (backend.h set_profile), so a profiled step loses its launch overlap.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "backend/blas_core_check.h"
#include "backend/copy_probe.h"
#include "backend/cpu_threads.h"
#include "backend/sgemm_probe.h"
#if defined(STREAMBP_HAVE_CUDA)
#include "backend/cuda_factory.h"
#endif
#include "check/random_batches.h"
#include "cli/commands.h"
#include "cli/context_flag.h"
#include "cli/exec_args.h"
#include "cli/flag_checks.h"
#include "cli/lora_args.h"
#include "cli/model_source.h"
#include "cli/objective_args.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/output_paths.h"
#include "core/process_memory.h"
#include "engine/memory_model.h"
#include "model/device_init.h"
#include "optim/lora_adamw.h"
#include "plan/cpu_probe.h"
#include "plan/gpu_profiles.h"
#include "plan/plan_step.h"
#include "plan/time_model.h"
#include "step/model_set.h"
#include "step/step_runner.h"

namespace sbp::cli {

namespace {

constexpr ExecFlags kBenchExec{.mode_list = true,
                               .chunks = ChunkDefault::quarter,
                               .precision_list = true,
                               .offload_list = true,
                               .offload_optimizer = true};
ExecArgs bench_exec() {
  ExecArgs e;
  e.modes = "checkpoint,stream";
  return e;
}

struct Args {
  std::string model;
  std::string seq_lens = "1024";
  ExecArgs exec = bench_exec();  // --modes, chunks (layer T/4, head 512), --precision list
  int64_t layers = 0;
  int repeat = 3;
  int warmup = 0;
  uint64_t seed = 0;
  std::string json;
  ObjectiveArgs objective;
  LoraArgs lora;
  int64_t segments = 0;  // 0: sft 1, dpo 2 (one pair), grpo one group, ppo 2
  int cp = 1;            // context parallelism: the ranks of `mpirun -np cp` share the rows
  bool profile = false;
  // adamw: each step ends as a training step does (norm, clipping, AdamW update; with offload
  // optimizer on the host), timed within the step and on its own.
  std::string optimizer = "none";
  // --predict DEVICE: each step's time as `plan --time` predicts it (plan/time_model.h), beside
  // the measured one: cpu (probed in this run, before the steps) or a GPU profile's name.
  std::string predict;
};

struct Run {
  std::string mode;
  std::string precision;
  int64_t T = 0, layer_chunk = 0, head_chunk = 0;
  double median_s = 0, tokens_per_s = 0, gflops = 0, loss = 0;
  double update_median_s = -1;  // --optimizer adamw: the step's norm, clipping and update
  int64_t peak = 0, activation_peak = 0, rss_peak = 0, analytic = 0;
  std::string offload = "none";
  int64_t host_peak = 0;                    // the host pool's peak (offload)
  int64_t logits_peak = 0, head_block = 0;  // ledger peak of `logits`; one head block's logits
  // CUDA backend: device memory its arena took at most / handed out at most (-1: not a GPU).
  int64_t device_reserved_peak = -1, device_in_use_peak = -1;
  // Calls of the run's steps that the GPU ran a second way (cuda_fallbacks); -1 off the GPU.
  int64_t gpu_fallbacks = -1;
  // Models with sliding-window layers: FLOPs of one step as counted by the backend, and as the
  // planner counts the same step with and without the windows (the difference is the work the
  // window skips; the backend's count includes its tile padding, the planner's does not).
  int64_t step_flops = 0, planned_flops = 0, planned_flops_no_window = 0;
  MemoryBreakdown breakdown;
  // --profile: the measured steps' ops by family, and those steps' summed wall time.
  OpProfile profile;
  double profiled_s = 0;
  int profiled_steps = 0;
  // --predict: the predicted step and what dominates it. On the CPU also the step's largest
  // GEMM shape timed right after the profile's probes (speed_ref_s) and again beside every
  // measured step: the prediction scaled by their ratio follows the share of a shared machine
  // each step got (tracked_s: the median over the measured steps).
  bool has_prediction = false;
  StepTime predicted;
  GemmShape speed_shape;
  double speed_ref_s = 0;
  std::vector<double> tracked;
  double tracked_s = -1;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      v.push_back(std::stoll(item));
    } catch (...) {
      throw InputError("--seq-len: '" + item + "' is not a number");
    }
    if (v.back() < 2 || v.back() > (int64_t{1} << 31) - 1)
      throw InputError("--seq-len values must be between 2 and 2^31-1");
  }
  return v;
}

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

// The GPU backend's hooks (no-ops elsewhere): a step is timed to the end of its last kernel, the
// yardstick on a GPU is a bf16 GEMM (cuBLASLt, 8192^3) instead of the CPU's sgemm.
bool on_gpu(const Backend& be) { return be.name().starts_with("cuda"); }
void device_sync(Backend& be) {
#if defined(STREAMBP_HAVE_CUDA)
  cuda_synchronize(be);
#endif
}
double gemm_probe(Backend& be) {
#if defined(STREAMBP_HAVE_CUDA)
  if (on_gpu(be)) return cuda_bf16_gemm_gflops(be, 8192);
#endif
  return measure_sgemm_gflops();
}
const char* gemm_probe_name(const Backend& be) {
  return on_gpu(be) ? "bf16 gemm (cuBLASLt, 8192^3)" : "sgemm (2048^3)";
}

// The models of one precision (the policy's weights, a reference copy, PPO's value model) and
// their gradients, in a ledger of their own, so that each precision's peak counts its own bytes.
struct Models {
  Precision precision;
  bool offload_optimizer;  // the optimizer's state in host_pool (offload: optimizer)
  Ledger ledger, host_ledger;
  Pool pool, host_pool;  // host_pool: where offloaded tensors wait (set per configuration)
  std::unique_ptr<ModelSet> set;
  Models(Precision p, bool offload_opt, Backend& be)
      : precision(p),
        offload_optimizer(offload_opt),
        pool(ledger, be),
        host_pool(host_ledger, be.host_memory()) {
    if (offload_opt) pool.set_host(&host_pool);
  }
};

// The end of a training step (train/training_loop.cpp): the gradient norm, clipping to 1, and
// the AdamW update of every trained model.
void optimizer_step(ModelSet& ms, Backend& be) {
  constexpr float kLr = 1e-5f;
  if (ms.has_lora()) {
    scale_lora_grads(ms.lora_grads(), be, 1.0, lora_grad_norm(ms.lora_grads(), be));
    ms.lora_optimizer()->step(ms.lora_weights(), ms.lora_grads(), be, kLr);
  } else {
    ms.policy().clip_to(1.0, ms.policy().grad_norm());
    ms.policy().update(ms.policy_weights(), kLr);
  }
  if (ms.has_value()) {
    ms.value().clip_to(1.0, ms.value().grad_norm());
    ms.value().update(ms.value_weights(), kLr);
  }
}

// What every length and mode of the run shares: the models per precision, one backend.
struct Bench {
  const Args& a;
  Communicator* context = nullptr;  // --cp: every step a rank of this group
  ModelSource src;
  ObjectiveSetup setup;
  LoraConfig lora;  // r = 0: full fine-tuning
  int64_t segments = 1;
  std::unique_ptr<Backend> be;
  std::vector<std::unique_ptr<Models>> models;  // one per --precision
  std::vector<double> sgemm_probes;
  AdamWConfig adamw;

  explicit Bench(const Args& args) : a(args), be(args.exec.make_backend()) {
    src = resolve_model(a.model, a.layers);
    setup = a.objective.setup();
    lora = a.lora.config();
    segments =
        a.segments > 0 ? a.segments : plan_sequences_of(setup.traits(), a.objective.group_size);
    // One set of models per precision and per place of the optimizer's state.
    std::vector<bool> places;
    for (const Offload& o : a.exec.offload_values()) {
      if (std::find(places.begin(), places.end(), o.optimizer) == places.end())
        places.push_back(o.optimizer);
    }
    for (const Precision p : a.exec.precision_values())
      for (bool offload_opt : places) {
        models.push_back(std::make_unique<Models>(p, offload_opt, *be));
        build(*models.back());
      }
  }

  // Weights, then gradients (kept across modes and steps: the ledger holds the same fixed bytes
  // in every mode), then a reference copy and the value model, as a run holds them. Weights of
  // another precision are the fp32 draw rounded.
  void build(Models& m) {
    const DType dt = storage_dtype(m.precision);
    m.set = std::make_unique<ModelSet>(
        setup, src.cfg, m.pool, *be,
        ModelSetOptions{.param_dtype = dt,
                        .optim = a.optimizer == "adamw" ? &adamw : nullptr,
                        .lora = lora.enabled() ? &lora : nullptr,
                        .offload_optimizer = m.offload_optimizer});
    if (m.set->has_lora()) init_lora(m.set->lora_weights(), a.seed, 0.02f);
    ParameterSet& w = m.set->policy_weights();
    if (!src.has_weights) {
      // Drawn on the backend (model/device_init.h): the 8B shapes' weights in a fraction of a
      // second on a GPU, not ~45 s on one host thread; the same values on every backend.
      init_parameters_on_backend(*be, w, a.seed, InitStyle::hf);
    } else if (dt == DType::F32) {
      fill_weights(src, w, a.seed, InitStyle::hf);
    } else {
      Ledger scratch_ledger;
      Pool scratch(scratch_ledger, *be);
      const ParameterSet f32 = materialize_weights(src, scratch, a.seed, InitStyle::hf);
      for (size_t i = 0; i < w.size(); ++i) be->copy(w.tensor(i), f32.tensor(i));
    }
    if (m.set->has_reference()) {  // its own copy of the policy's weights
      const ParameterSet& ref = m.set->reference_weights();
      for (size_t i = 0; i < ref.size(); ++i) be->copy(ref.tensor(i), w.get(ref.name(i)));
    }
    if (m.set->has_value())
      init_parameters_on_backend(*be, m.set->value_weights(), a.seed + 1, InitStyle::hf);
    // The optimizer's copies of the weights (master, host copy) follow the drawn weights.
    if (a.optimizer == "adamw" && !m.set->has_lora()) m.set->policy().weights_set(w);
    if (a.optimizer == "adamw" && m.set->has_value())
      m.set->value().weights_set(m.set->value_weights());
  }

  // Every (precision, mode) step at one T, round robin: step i of every configuration runs
  // before step i+1 of any, so a slow spell of a shared machine falls on all alike and the
  // ratios of the medians stay fair. The sgemm probe runs between the rounds.
  void at_length(int64_t T, std::vector<Run>& runs) {
    check_segments(T, segments);
    const Batch batch = !setup.traits().completions
                            ? random_batch(src.cfg.vocab_size, T, segments, a.seed, false)
                            : random_objective_batch(setup.kind, a.objective.group_size,
                                                     src.cfg.vocab_size, T, segments, a.seed);
    const StepBatches step =
        StepBatches::whole({random_micro_batch(setup.kind, a.objective.group_size, batch, a.seed)});
    struct Config {
      Models* m;
      ExecConfig exec;
      std::vector<double> times, update_times;
    };
    std::vector<Config> configs;
    const size_t first = runs.size();
    for (const std::unique_ptr<Models>& m : models) {
      for (const ExecConfig& exec_mode : a.exec.configs(ChunkDefault::quarter, T, m->precision))
        for (const Offload& offload : a.exec.offload_values()) {
          if (offload.optimizer != m->offload_optimizer) continue;  // another set's
          ExecConfig exec = exec_mode;
          exec.offload = offload;
          Run r;
          r.mode = mode_name(exec) + (offload.any() ? "/" + offload_name(offload) : "");
          r.offload = offload_name(offload);
          r.precision = enum_name<Precision>(kPrecisionNames, m->precision);
          r.T = T;
          r.layer_chunk = exec.layer_chunk_for(T);
          r.head_chunk = exec.head_chunk_for(T);
          r.head_block =
              r.head_chunk * src.cfg.vocab_size * static_cast<int64_t>(dtype_size(exec.act_dtype));
          if (src.cfg.has_sliding_layers()) {
            // The same step on the meta backend, with the windows and with every layer full.
            const StepMemoryOptions mem{.param_dtype = storage_dtype(m->precision),
                                        .count_flops = true};
            ModelConfig full = src.cfg;
            full.layer_sliding.assign(full.layer_sliding.size(), false);
            r.planned_flops = plan_step(src.cfg, setup, exec, step, mem).flops;
            r.planned_flops_no_window = plan_step(full, setup, exec, step, mem).flops;
          }
          configs.push_back({m.get(), exec, {}, {}});
          runs.push_back(r);
        }
    }
    if (!a.predict.empty())
      for (size_t k = 0; k < configs.size(); ++k) {
        std::fprintf(stderr, "bench: predicting %s %s T=%lld ...\n",
                     runs[first + k].precision.c_str(), runs[first + k].mode.c_str(),
                     static_cast<long long>(T));
        predict(runs[first + k], configs[k].m->precision, configs[k].exec, step);
      }
    for (int i = 0; i < a.warmup + a.repeat; ++i) {
      for (size_t k = 0; k < configs.size(); ++k) {
        Run& r = runs[first + k];
        Config& c = configs[k];
        std::fprintf(stderr, "bench: %s %s T=%lld step %d/%d ...\n", r.precision.c_str(),
                     r.mode.c_str(), static_cast<long long>(T), i + 1, a.warmup + a.repeat);
        be->release_cached();  // this step's peak resident memory, not an earlier mode's
        be->host_memory().release_cached();
        reset_peak_rss();
        c.m->ledger.reset_peak();
        c.m->host_ledger.reset_peak();
        c.m->pool.set_host(c.exec.offload.any() ? &c.m->host_pool : nullptr);
#if defined(STREAMBP_HAVE_CUDA)
        cuda_reset_device_peaks(*be);
#endif
        if (r.speed_ref_s > 0) {  // --predict cpu: the machine's speed beside this step
          const double now = time_gemm(*be, r.speed_shape);
          if (i >= a.warmup) r.tracked.push_back(r.predicted.seconds * now / r.speed_ref_s);
        }
        be->reset_flops();
        const bool profiled = a.profile && i >= a.warmup;
        be->set_profile(profiled ? &r.profile : nullptr);
        device_sync(*be);
#if defined(STREAMBP_HAVE_CUDA)
        const int64_t fallbacks_before = cuda_fallbacks(*be);
#endif
        const auto t0 = std::chrono::steady_clock::now();
        const StepResult out = StepRunner(setup, c.m->set->views(), *be, c.m->pool, c.exec,
                                          single_process(), StepRunnerOptions{.context = context})
                                   .run(step);
        if (a.optimizer == "adamw") {
          device_sync(*be);
          const auto u0 = std::chrono::steady_clock::now();
          optimizer_step(*c.m->set, *be);
          device_sync(*be);
          if (i >= a.warmup)
            c.update_times.push_back(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - u0).count());
        }
        device_sync(*be);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        be->set_profile(nullptr);
        if (profiled) {
          r.profiled_s += s;
          r.profiled_steps += 1;
        }
        if (i >= a.warmup) c.times.push_back(s);
        r.step_flops = be->flops();  // FLOPs of one step (the same every step)
        r.gflops = static_cast<double>(r.step_flops);
        r.loss = out.loss;
        const Ledger& ledger = c.m->ledger;
        if (ledger.peak() > r.peak) {
          r.peak = ledger.peak();
          r.breakdown = ledger.peak_breakdown();
        }
        r.host_peak = std::max(r.host_peak, c.m->host_ledger.peak());
        r.logits_peak = std::max(r.logits_peak, ledger.category_peak(Category::logits));
        r.rss_peak = std::max(r.rss_peak, peak_rss_bytes());
#if defined(STREAMBP_HAVE_CUDA)
        r.device_reserved_peak = std::max(r.device_reserved_peak, cuda_device_peak_reserved(*be));
        r.device_in_use_peak = std::max(r.device_in_use_peak, cuda_device_peak_in_use(*be));
        if (fallbacks_before >= 0)
          r.gpu_fallbacks = std::max<int64_t>(r.gpu_fallbacks, 0) + cuda_fallbacks(*be) -
                            fallbacks_before;
#endif
      }
      sgemm_probes.push_back(gemm_probe(*be));
    }
    for (size_t k = 0; k < configs.size(); ++k) {
      finish(runs[first + k], configs[k].times, configs[k].exec);
      std::vector<double>& u = configs[k].update_times;
      std::sort(u.begin(), u.end());
      if (!u.empty()) runs[first + k].update_median_s = u[u.size() / 2];
    }
  }

  // --predict: the same step (same batches, same mode) on the meta backend with its ops
  // recorded, priced on the device's profile; on the CPU the profile is probed now, from this
  // step's shapes.
  void predict(Run& r, Precision p, const ExecConfig& exec, const StepBatches& step) const {
    OpProfile ops;
    StepMemoryOptions mem{.param_dtype = storage_dtype(p), .ops = &ops};
    mem.lora = lora.enabled() ? &lora : nullptr;
    const PlannedStep planned = plan_step(src.cfg, setup, exec, step, mem);
    const DeviceProfile dev =
        a.predict == "cpu"
            ? probe_cpu_profile(ops, src.cfg,
                                CpuProbeShape{.act_dtype = exec.act_dtype,
                                              .rows = std::min<int64_t>(r.layer_chunk, 4096),
                                              .head_rows = std::min<int64_t>(r.head_chunk, 4096),
                                              .keys = std::min<int64_t>(r.T, 4096)})
            : gpu_profile(a.predict);
    StepShape shape;
    shape.tokens = r.T;
    const ModelFlops f = model_flops(src.cfg, step.micro.front().batch.seq_lens);
    shape.model_flops_raw = f.raw;
    shape.model_flops_causal = f.causal;
    shape.layers = src.cfg.num_hidden_layers;
    shape.param_dtype = storage_dtype(p);
    if (a.optimizer == "adamw" && !lora.enabled()) {
      shape.optimizer_params = src.cfg.num_parameters();
      shape.optimizer_on_host = exec.offload.optimizer;
    }
    r.predicted = predict_step_time(ops, planned, dev, shape);
    r.has_prediction = true;
    if (a.predict == "cpu") {
      r.speed_shape = largest_gemm(ops);
      r.speed_ref_s = time_gemm(*be, r.speed_shape);
    }
  }

  void finish(Run& r, std::vector<double>& times, const ExecConfig& exec) const {
    if (!r.tracked.empty()) {
      std::sort(r.tracked.begin(), r.tracked.end());
      r.tracked_s = r.tracked[r.tracked.size() / 2];
    }
    std::sort(times.begin(), times.end());
    r.median_s = times[times.size() / 2];
    r.tokens_per_s = static_cast<double>(r.T) / r.median_s;
    r.gflops = r.gflops / r.median_s / 1e9;
    r.activation_peak = r.peak - r.breakdown[Category::weights] - r.breakdown[Category::grads] -
                        r.breakdown[Category::optimizer];
    if (setup.traits().analytic_memory && exec.layers == LayerMode::stream &&
        exec.head == HeadMode::chunked)
      r.analytic = stream_memory_terms(src.cfg, r.T, r.layer_chunk, r.head_chunk, exec.act_dtype)
                       .activation_peak();
  }
};

// --predict: each run's predicted step beside its measured median.
void print_predicted(const std::vector<Run>& runs, const std::string& device) {
  const bool cpu = device == "cpu";
  std::printf(
      "\npredicted (plan --time, device %s%s) beside measured (median step s)\n"
      "| mode | precision | T | measured s | predicted s | predicted / measured |%s dominant "
      "(predicted) |\n|---|---|---:|---:|---:|---:|%s---|\n",
      device.c_str(),
      cpu ? ": probed in this run before the steps; tracked: scaled by the step's largest GEMM "
            "timed beside each measured step over the same GEMM timed with the probes"
          : "",
      cpu ? " tracked s | tracked / measured |" : "", cpu ? "---:|---:|" : "");
  for (const Run& r : runs) {
    std::printf("| %s | %s | %lld | %.4f | %.4f | %.3f |", r.mode.c_str(), r.precision.c_str(),
                static_cast<long long>(r.T), r.median_s, r.predicted.seconds,
                r.predicted.seconds / r.median_s);
    if (cpu) std::printf(" %.4f | %.3f |", r.tracked_s, r.tracked_s / r.median_s);
    std::printf(" %s |\n", r.predicted.dominant.c_str());
  }
}

void print_tables(const Bench& b, const std::vector<Run>& runs, double sgemm,
                  std::vector<double> probes) {
  std::sort(probes.begin(), probes.end());
  std::printf(
      "bench: %s (%s, %lld layers), objective %s, %lld segment(s), %d thread(s), "
      "median of %d step(s), modes and precisions interleaved\n",
      b.a.model.c_str(), model_type_name(b.src.cfg.model_type),
      static_cast<long long>(b.src.cfg.num_hidden_layers), b.a.objective.describe().c_str(),
      static_cast<long long>(b.segments), cpu_threads(), b.a.repeat);
  if (b.context)
    std::printf(
        "context parallel: %d ranks share each step's rows (rank 0's time and memory; "
        "%d thread(s) each)\n",
        b.context->size(), cpu_threads());
  const cpu::BlasCoreCheck blas = cpu::check_blas_core();
  std::printf(
      "%s: %.1f GFLOP/s (median of %zu probes between the rounds of steps, range "
      "%.1f-%.1f); BLAS %s, core %s, CPU vectors %s%s; attention kernels %s; bf16 GEMM %s\n\n",
      gemm_probe_name(*b.be), sgemm, probes.size(), probes.front(), probes.back(),
      blas.provider.c_str(), blas.core.empty() ? "(not named)" : blas.core.c_str(),
      blas.cpu_vectors.c_str(), blas.generic ? " (GENERIC kernels: see the warning)" : "",
      blas.attention.c_str(), blas.gemm_bf16.c_str());
  std::printf(
      "| mode | precision | T | layer chunk | head chunk | step s | tokens/s | GFLOP/s | %% sgemm "
      "| "
      "ledger peak MiB | activation peak MiB | analytic MiB | RSS peak MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    char analytic[32] = "-";
    if (r.analytic > 0) std::snprintf(analytic, sizeof analytic, "%.1f", mib(r.analytic));
    std::printf(
        "| %s | %s | %lld | %lld | %lld | %.3f | %.1f | %.1f | %.0f%% | %.1f | %.1f | %s | %.1f "
        "|\n",
        r.mode.c_str(), r.precision.c_str(), static_cast<long long>(r.T),
        static_cast<long long>(r.layer_chunk), static_cast<long long>(r.head_chunk), r.median_s,
        r.tokens_per_s, r.gflops, 100.0 * r.gflops / sgemm, mib(r.peak), mib(r.activation_peak),
        analytic, mib(r.rss_peak));
  }
  if (b.a.optimizer == "adamw") {
    std::printf(
        "\nThe optimizer (--optimizer adamw): each step ends with the gradient norm, clipping and "
        "the AdamW update, timed within the step s above and on its own here (with "
        "offload optimizer: on the host, %d thread(s))\n",
        cpu_threads());
    std::printf("| mode | precision | T | step s | update s | update %% of step |\n");
    std::printf("|---|---|---|---:|---:|---:|\n");
    for (const Run& r : runs)
      std::printf("| %s | %s | %lld | %.3f | %.4f | %.1f%% |\n", r.mode.c_str(),
                  r.precision.c_str(), static_cast<long long>(r.T), r.median_s, r.update_median_s,
                  100.0 * r.update_median_s / r.median_s);
  }
  std::printf("\nLM-head logits: the ledger's peak of `logits` vs one head block (c_h x V)\n");
  std::printf(
      "| mode | precision | T | head chunk | one block MiB | logits peak MiB | blocks live at once "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    std::printf("| %s | %s | %lld | %lld | %.1f | %.1f | %.2f |\n", r.mode.c_str(),
                r.precision.c_str(), static_cast<long long>(r.T),
                static_cast<long long>(r.head_chunk), mib(r.head_block), mib(r.logits_peak),
                static_cast<double>(r.logits_peak) / static_cast<double>(r.head_block));
  }
  if (b.src.cfg.has_sliding_layers()) {
    const ModelConfig& cfg = b.src.cfg;
    int64_t sliding = 0;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) sliding += cfg.layer_is_sliding(l) ? 1 : 0;
    std::printf(
        "\nSliding window (w = %lld, %lld of %lld layers): FLOPs of one step; the planner's "
        "count of the same step with every layer full, minus its count with the windows, is the "
        "attention work the window skips\n",
        static_cast<long long>(cfg.sliding_window), static_cast<long long>(sliding),
        static_cast<long long>(cfg.num_hidden_layers));
    std::printf(
        "| mode | precision | T | counted GFLOP | planned GFLOP | planned GFLOP, no window | "
        "skipped by the window GFLOP | skipped %% |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const Run& r : runs) {
      const int64_t skipped = r.planned_flops_no_window - r.planned_flops;
      std::printf("| %s | %s | %lld | %.4g | %.4g | %.4g | %.4g | %.1f%% |\n", r.mode.c_str(),
                  r.precision.c_str(), static_cast<long long>(r.T), r.step_flops / 1e9,
                  r.planned_flops / 1e9, r.planned_flops_no_window / 1e9, skipped / 1e9,
                  100.0 * static_cast<double>(skipped) /
                      static_cast<double>(std::max<int64_t>(1, r.planned_flops_no_window)));
    }
  }
  if (on_gpu(*b.be)) {
    std::printf("\nDevice memory (the CUDA backend's arena) vs the ledger's peak\n");
    std::printf(
        "| mode | precision | T | ledger peak MiB | device in use peak MiB | device reserved peak "
        "MiB |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const Run& r : runs)
      std::printf("| %s | %s | %lld | %.1f | %.1f | %.1f |\n", r.mode.c_str(), r.precision.c_str(),
                  static_cast<long long>(r.T), mib(r.peak), mib(r.device_in_use_peak),
                  mib(r.device_reserved_peak));
  }
  std::printf("\nledger breakdown at the peak (MiB)\n| mode | precision | T |");
  for (int c = 0; c < kNumCategories; ++c)
    std::printf(" %s |", category_name(static_cast<Category>(c)));
  std::printf(" host peak |\n|---|---|---|");
  for (int c = 0; c < kNumCategories; ++c) std::printf("---|");
  std::printf("---|\n");
  for (const Run& r : runs) {
    std::printf("| %s | %s | %lld |", r.mode.c_str(), r.precision.c_str(),
                static_cast<long long>(r.T));
    for (int c = 0; c < kNumCategories; ++c)
      std::printf(" %.1f |", mib(r.breakdown.bytes[static_cast<size_t>(c)]));
    std::printf(" %.1f |\n", mib(r.host_peak));
  }
}

// --profile: per run, each family's share of the measured steps (per-step means), achieved rate
// against its yardstick, and the time no op accounts for (host code, allocation, page faults of
// fresh buffers, zeroing by the pool, uploads and downloads of per-row vectors).
void print_profile(const std::vector<Run>& runs, double sgemm, double copy_gbs) {
  for (const Run& r : runs) {
    if (r.profiled_steps == 0) continue;
    const double n = r.profiled_steps, step = r.profiled_s / n;
    std::printf(
        "\nprofile: %s %s T=%lld, mean of %d measured step(s): %.3f s/step; yardsticks sgemm "
        "%.1f GFLOP/s, copy %.1f GB/s (read + written, one thread)\n",
        r.mode.c_str(), r.precision.c_str(), static_cast<long long>(r.T), r.profiled_steps, step,
        sgemm, copy_gbs);
    std::printf("| family | calls/step | s/step | %% of step | achieved | %% of yardstick |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    for (int f = 0; f < kNumOpFamilies; ++f) {
      const OpFamily fam = static_cast<OpFamily>(f);
      const OpTotals& t = r.profile[fam];
      if (t.calls == 0) continue;
      const double sec = t.seconds / n;
      char rate[48], share[32];
      if (op_family_counts_flops(fam)) {
        const double g = t.seconds > 0 ? static_cast<double>(t.flops) / t.seconds / 1e9 : 0.0;
        std::snprintf(rate, sizeof rate, "%.1f GFLOP/s", g);
        std::snprintf(share, sizeof share, "%.0f%% of sgemm", 100.0 * g / sgemm);
      } else {
        const double g = t.seconds > 0 ? static_cast<double>(t.bytes) / t.seconds / 1e9 : 0.0;
        std::snprintf(rate, sizeof rate, "%.1f GB/s", g);
        if (copy_gbs > 0)
          std::snprintf(share, sizeof share, "%.0f%% of copy", 100.0 * g / copy_gbs);
        else
          std::snprintf(share, sizeof share, "n/a");  // no device copy probe
      }
      std::printf("| %s | %.0f | %.3f | %.1f%% | %s | %s |\n", op_family_name(fam),
                  static_cast<double>(t.calls) / n, sec, 100.0 * sec / step, rate, share);
    }
    const double ops = r.profile.seconds() / n;
    std::printf("| other (step - families) | | %.3f | %.1f%% | | |\n", step - ops,
                100.0 * (step - ops) / step);
    std::printf("| step | | %.3f | 100%% | %.1f GFLOP/s | %.0f%% of sgemm |\n", step,
                static_cast<double>(r.step_flops) / step / 1e9,
                100.0 * static_cast<double>(r.step_flops) / step / 1e9 / sgemm);
  }
}

void write_json(const Bench& b, const std::vector<Run>& runs, double sgemm,
                const std::vector<double>& probes, double copy_gbs) {
  nlohmann::json j;
  j["sgemm_gflops"] = sgemm;
  if (copy_gbs > 0) j["copy_gbs"] = copy_gbs;
  j["sgemm_gflops_probes"] = probes;
  j["gemm_probe"] = gemm_probe_name(*b.be);  // what sgemm_gflops measured
  const cpu::BlasCoreCheck blas = cpu::check_blas_core();
  j["blas"] = {{"provider", blas.provider},
               {"core", blas.core},
               {"cpu_vectors", blas.cpu_vectors},
               {"generic", blas.generic}};
  j["attention_isa"] = blas.attention;  // the CPU attention kernels' instruction set
  j["gemm_bf16"] = blas.gemm_bf16;      // how products with a BF16 operand multiply
  j["backend"] = b.be->name();
  j["model"] = b.a.model;
  j["objective"] = b.a.objective.describe();
  j["threads"] = cpu_threads();
  j["context_parallel"] = b.context ? b.context->size() : 1;
  j["runs"] = nlohmann::json::array();
  for (const Run& r : runs) {
    nlohmann::json jr = {{"mode", r.mode},
                         {"precision", r.precision},
                         {"seq_len", r.T},
                         {"layer_chunk", r.layer_chunk},
                         {"head_chunk", r.head_chunk},
                         {"step_seconds_median", r.median_s},
                         {"tokens_per_second", r.tokens_per_s},
                         {"peak_bytes", r.peak},
                         {"activation_peak_bytes", r.activation_peak},
                         {"rss_peak_bytes", r.rss_peak},
                         {"achieved_gflops", r.gflops},
                         {"loss", r.loss},
                         {"logits_peak_bytes", r.logits_peak},
                         {"head_block_logits_bytes", r.head_block},
                         {"offload", r.offload},
                         {"host_peak_bytes", r.host_peak}};
    if (r.analytic > 0) jr["analytic_activation_peak_bytes"] = r.analytic;
    if (r.update_median_s >= 0) jr["update_seconds_median"] = r.update_median_s;
    jr["step_flops"] = r.step_flops;
    if (r.has_prediction) {
      jr["predicted_seconds"] = r.predicted.seconds;
      jr["predicted_over_measured"] = r.predicted.seconds / r.median_s;
      if (r.tracked_s > 0) {
        jr["predicted_tracked_seconds"] = r.tracked_s;
        jr["predicted_tracked_over_measured"] = r.tracked_s / r.median_s;
      }
      jr["predicted_dominant"] = r.predicted.dominant;
      jr["predicted_mfu_causal"] = r.predicted.mfu_causal;
    }
    if (r.planned_flops > 0) {
      jr["planned_flops"] = r.planned_flops;
      jr["planned_flops_no_window"] = r.planned_flops_no_window;
      jr["window_skipped_flops"] = r.planned_flops_no_window - r.planned_flops;
    }
    if (r.gpu_fallbacks >= 0) jr["gpu_fallbacks"] = r.gpu_fallbacks;
    if (r.device_reserved_peak >= 0) {
      jr["device_reserved_peak_bytes"] = r.device_reserved_peak;
      jr["device_in_use_peak_bytes"] = r.device_in_use_peak;
    }
    if (r.profiled_steps > 0) {  // sums over the measured steps
      jr["profile"]["steps"] = r.profiled_steps;
      jr["profile"]["step_seconds_sum"] = r.profiled_s;
      for (int f = 0; f < kNumOpFamilies; ++f) {
        const OpTotals& t = r.profile[static_cast<OpFamily>(f)];
        jr["profile"]["families"][op_family_name(static_cast<OpFamily>(f))] = {
            {"calls", t.calls}, {"seconds", t.seconds}, {"flops", t.flops}, {"bytes", t.bytes}};
      }
    }
    for (int c = 0; c < kNumCategories; ++c)
      jr["breakdown"][category_name(static_cast<Category>(c))] =
          r.breakdown.bytes[static_cast<size_t>(c)];
    j["runs"].push_back(jr);
  }
  write_file_atomically(b.a.json, j.dump(2) + "\n");
}

int run(const Args& a) {
  check_output_dir("--json", a.json);
  refuse_output_over_inputs({"--json", a.json}, {{"--model", a.model}});
  a.exec.set_threads();
  warn_if_generic_blas();
  if (a.warmup < 0) throw InputError("--warmup must be >= 0");
  // --cp N: one context group of the N ranks of `mpirun -np N`; rank 0 reports (its own step's
  // time and memory: the ranks wait for each other's K/V and dK/dV every layer).
  const std::unique_ptr<Communicator> world = context_group_from_flag(a.cp, "bench");
  const std::vector<int64_t> lens = parse_list(a.seq_lens);
  a.exec.configs(ChunkDefault::quarter, 1, Precision::fp32);  // a bad mode fails before any work
  for (const Offload& o : a.exec.offload_values())  // and an optimizer offloaded without one
    if (o.optimizer && a.optimizer != "adamw")
      throw InputError(
          "--offload optimizer: there is no optimizer to offload (add --optimizer adamw)");
  // Probed again after every round of steps: the median is the yardstick of the same moments
  // the steps ran in (a shared machine's speed drifts). On the CPU the first probe runs before
  // the models exist (as it always did); a GPU's needs the backend.
  double first_probe = -1;
  if (!a.exec.backend.starts_with("cuda")) {
    std::fprintf(stderr, "bench: measuring sgemm...\n");
    first_probe = measure_sgemm_gflops();
  }
  Bench b(a);
  b.context = world.get();
  if (first_probe < 0) {
    std::fprintf(stderr, "bench: measuring %s...\n", gemm_probe_name(*b.be));
    first_probe = gemm_probe(*b.be);
  }
  b.sgemm_probes.push_back(first_probe);
  std::vector<Run> runs;
  for (int64_t T : lens) b.at_length(T, runs);
  std::vector<double> probes = b.sgemm_probes;
  std::sort(probes.begin(), probes.end());
  const double sgemm = probes[probes.size() / 2];
  print_tables(b, runs, sgemm, probes);
  if (!a.predict.empty()) print_predicted(runs, a.predict);
  double copy_gbs = 0;  // the host's copy bandwidth: the yardstick of the CPU's memory-bound ops
  if (a.profile) {
    if (a.exec.backend == "cpu") {
      std::fprintf(stderr, "bench: measuring copy bandwidth...\n");
      copy_gbs = measure_copy_bandwidth_gbs();
    }
    print_profile(runs, sgemm, copy_gbs);
  }
  if (!a.json.empty()) write_json(b, runs, sgemm, b.sgemm_probes, copy_gbs);
  return 0;
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("bench", "Time and memory of a training step per mode and T");
  c->add_option("--model", a->model, "Model directory, config.json or preset")->required();
  c->add_option("--seq-len", a->seq_lens, "Comma-separated sequence lengths");
  c->add_option("--layers", a->layers, "Override the number of layers (random weights)")
      ->check(int_in(1, kMaxFlagInt));
  // CLI::PositiveNumber accepted 0 and named the range as 0 to 1.8e308.
  c->add_option("--repeat", a->repeat, "Timed steps per run (median reported)")
      ->check(int_in(1, 1000000));
  c->add_option("--warmup", a->warmup, "Untimed steps before the timed ones")
      ->check(int_in(0, 1000000));
  c->add_option("--seed", a->seed, "Seed for weights and batch")->check(uint64_flag());
  c->add_option("--json", a->json, "Write the results as JSON")->check(non_empty());
  c->add_option("--cp", a->cp,
                "Context parallelism: under mpirun -np N, --cp N splits every step's rows across "
                "the N ranks (rank 0 reports)")
      ->check(int_in(1, 4096));
  a->exec.add_flags(c, kBenchExec);
  c->add_option("--segments", a->segments,
                "Sequences in the batch (default: sft 1, dpo 2 = one pair, grpo one group, ppo 2)")
      ->check(int_in(1, kMaxFlagInt));
  c->add_flag("--profile", a->profile,
              "Split the measured steps' time by kernel family (a GPU's ops are synchronised "
              "around each)");
  c->add_option("--predict", a->predict,
                "Print each step's time as plan --time predicts it on this device (cpu: probed "
                "in the run; h100, h200, a100, rtx4090: datasheet profiles) beside the measured")
      ->check(CLI::IsMember({"cpu", "h100", "h200", "a100", "rtx4090"}));
  c->add_option("--optimizer", a->optimizer,
                "none, or adamw: every step ends with the norm, clipping and an AdamW update "
                "(with --offload optimizer: on the host)")
      ->check(CLI::IsMember({"none", "adamw"}));
  a->objective.add_flags(c);
  a->lora.add_flags(c);
  c->callback([a] { run(*a); });
}

}  // namespace sbp::cli
