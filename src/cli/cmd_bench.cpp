// streambp bench: time and memory of one training step of an objective (sft, dpo, grpo, ppo)
// per (mode, T), with the machine's sgemm speed measured in the same run as the yardstick for
// achieved GFLOP/s. For DPO, GRPO (beta != 0) and PPO the step includes the reference model's
// forward, on its own copy of the weights (a real run holds two models); PPO's rollout
// constants (old log-probs, values, GAE) are computed before the timed steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/sgemm_probe.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/process_memory.h"
#include "engine/engine.h"
#include "engine/gradcheck.h"
#include "engine/memory_model.h"
#include "engine/objective_step.h"

namespace sbp::cli {

namespace {

struct Args {
  std::string model;
  std::string seq_lens = "1024";
  std::string modes = "checkpoint,stream";
  int64_t layer_chunk = 0;  // 0: T/4
  int64_t head_chunk = 512;
  int64_t layers = 0;
  int repeat = 3;
  int warmup = 0;
  int threads = 0;
  uint64_t seed = 0;
  std::string json;
  ObjectiveArgs objective;
  int64_t segments = 0;  // 0: sft 1, dpo 2 (one pair), grpo one group, ppo 2
};

struct Run {
  std::string mode;
  int64_t T = 0, layer_chunk = 0, head_chunk = 0;
  double median_s = 0, tokens_per_s = 0, gflops = 0, loss = 0;
  int64_t peak = 0, activation_peak = 0, rss_peak = 0, analytic = 0;
  int64_t logits_peak = 0, head_block = 0;  // ledger peak of `logits`; one head block's logits
  MemoryBreakdown breakdown;
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
    if (v.back() < 2) throw InputError("--seq-len values must be at least 2");
  }
  return v;
}

double mib(int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

int run(const Args& a) {
  set_cpu_threads(a.threads);
  const ModelSource src = resolve_model(a.model, a.layers);
  const std::vector<int64_t> lens = parse_list(a.seq_lens);
  const std::vector<ExecConfig> modes = parse_modes(a.modes);

  std::fprintf(stderr, "bench: measuring sgemm...\n");
  // Probed again after every round of steps: the median is the yardstick of the same moments
  // the steps ran in (a shared machine's speed drifts).
  std::vector<double> sgemm_probes{measure_sgemm_gflops()};
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ObjectiveSetup setup = a.objective.setup();
  // GRPO as TRL runs it with num_iterations = 1: old log-probs = the current ones, detached (no
  // extra scoring pass). PPO's rollout has its own old log-probs, from the policy's forward.
  setup.old_logp_noise = setup.kind == ObjectiveKind::ppo ? setup.old_logp_noise : 0.0f;
  const ParameterSet w = materialize_weights(src, pool, a.seed, InitStyle::hf);
  ParameterSet reference, value;
  ObjectiveModels models{src.cfg, w};
  if (setup.needs_reference()) {
    // Its own copy: a real run holds the policy and the reference model side by side.
    reference = make_reference_weights(src.cfg, w, pool, 0.0f, a.seed);
    models.reference = &reference;
  }
  if (setup.needs_value_model()) {
    value = ParameterSet(src.cfg, pool, Category::weights, DType::F32, false, ModelHead::value);
    init_parameters(value, a.seed + 1, InitStyle::hf);
    models.value = &value;
  }
  int64_t segments = a.segments;
  if (segments <= 0) {
    segments = setup.kind == ObjectiveKind::sft    ? 1
               : setup.kind == ObjectiveKind::grpo ? setup.group_size
                                                   : 2;
  }
  std::vector<Run> runs;
  for (int64_t T : lens) {
    const Batch batch = setup.kind == ObjectiveKind::sft
                            ? random_batch(src.cfg.vocab_size, T, segments, a.seed, false)
                            : random_objective_batch(setup, src.cfg.vocab_size, T, segments, a.seed);
    // One gradient set for every mode (a step zeroes nothing; each mode's step adds into it and
    // the values are not used), so the ledger holds the same weights and grads in every mode.
    ParameterSet g(src.cfg, pool, Category::grads, DType::F32, true);
    ParameterSet vg;
    if (models.value) vg = ParameterSet(src.cfg, pool, Category::grads, DType::F32, true, ModelHead::value);
    struct ModeRun {
      ExecConfig exec;
      StepConstants constants;
      std::vector<double> times;
      Run r;
    };
    std::vector<ModeRun> mrs;
    for (ExecConfig exec : modes) {
      exec.layer_chunk = a.layer_chunk > 0 ? a.layer_chunk : std::max<int64_t>(1, (T + 3) / 4);
      exec.head_chunk = a.head_chunk;
      ModeRun m;
      m.exec = exec;
      Run& r = m.r;
      r.mode = mode_name(exec);
      r.T = T;
      r.layer_chunk = exec.layer_chunk_for(T);
      r.head_chunk = exec.head_chunk_for(T);
      r.head_block = r.head_chunk * src.cfg.vocab_size * 4;
      // PPO's rollout (and GRPO's old log-probs) happen before the step, outside its peak.
      m.constants = make_step_constants(setup, models, batch, be, pool, exec, a.seed);
      mrs.push_back(std::move(m));
    }
    // Round robin: step i of every mode runs before step i+1 of any, so a slow spell of a shared
    // machine falls on every mode alike and the ratios of the medians stay fair.
    for (int i = 0; i < a.warmup + a.repeat; ++i) {
      for (ModeRun& m : mrs) {
        Run& r = m.r;
        std::fprintf(stderr, "bench: %s T=%lld step %d/%d ...\n", r.mode.c_str(), static_cast<long long>(T),
                     i + 1, a.warmup + a.repeat);
        reset_peak_rss();
        ledger.reset_peak();
        be.reset_flops();
        const auto t0 = std::chrono::steady_clock::now();
        const StepOutcome out = run_objective_step(setup, models, m.constants, batch, be, pool, m.exec, g,
                                                   models.value ? &vg : nullptr);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i >= a.warmup) m.times.push_back(s);
        r.gflops = static_cast<double>(be.flops());  // FLOPs of one step (the same every step)
        r.loss = out.loss;
        if (ledger.peak() > r.peak) {
          r.peak = ledger.peak();
          r.breakdown = ledger.peak_breakdown();
        }
        r.logits_peak = std::max(r.logits_peak, ledger.category_peak(Category::logits));
        r.rss_peak = std::max(r.rss_peak, peak_rss_bytes());
      }
      sgemm_probes.push_back(measure_sgemm_gflops());
    }
    for (ModeRun& m : mrs) {
      Run& r = m.r;
      std::sort(m.times.begin(), m.times.end());
      r.median_s = m.times[m.times.size() / 2];
      r.tokens_per_s = static_cast<double>(T) / r.median_s;
      r.gflops = r.gflops / r.median_s / 1e9;
      r.activation_peak = r.peak - r.breakdown[Category::weights] - r.breakdown[Category::grads] -
                          r.breakdown[Category::optimizer];
      if (setup.kind == ObjectiveKind::sft && m.exec.layers == LayerMode::stream &&
          m.exec.head == HeadMode::chunked) {
        r.analytic =
            stream_memory_terms(src.cfg, T, r.layer_chunk, r.head_chunk, m.exec.act_dtype).activation_peak();
      }
      runs.push_back(r);
    }
  }

  std::sort(sgemm_probes.begin(), sgemm_probes.end());
  const double sgemm = sgemm_probes[sgemm_probes.size() / 2];
  std::printf("bench: %s (%s, %lld layers), objective %s, %lld segment(s), %d thread(s), "
              "median of %d step(s), modes interleaved\n",
              a.model.c_str(), src.cfg.model_type.c_str(),
              static_cast<long long>(src.cfg.num_hidden_layers), a.objective.describe().c_str(),
              static_cast<long long>(segments), cpu_threads(), a.repeat);
  std::printf("sgemm: %.1f GFLOP/s (2048^3, median of %zu probes between the rounds of steps, range %.1f-%.1f)\n\n",
              sgemm, sgemm_probes.size(), sgemm_probes.front(), sgemm_probes.back());
  std::printf("| mode | T | layer chunk | head chunk | step s | tokens/s | GFLOP/s | %% sgemm | "
              "ledger peak MiB | activation peak MiB | analytic MiB | RSS peak MiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    char analytic[32] = "-";
    if (r.analytic > 0) std::snprintf(analytic, sizeof analytic, "%.1f", mib(r.analytic));
    std::printf("| %s | %lld | %lld | %lld | %.3f | %.1f | %.1f | %.0f%% | %.1f | %.1f | %s | %.1f |\n",
                r.mode.c_str(), static_cast<long long>(r.T), static_cast<long long>(r.layer_chunk),
                static_cast<long long>(r.head_chunk), r.median_s, r.tokens_per_s, r.gflops,
                100.0 * r.gflops / sgemm, mib(r.peak), mib(r.activation_peak), analytic,
                mib(r.rss_peak));
  }
  std::printf("\nLM-head logits: the ledger's peak of `logits` vs one head block (c_h x V fp32)\n");
  std::printf("| mode | T | head chunk | one block MiB | logits peak MiB | blocks live at once |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Run& r : runs) {
    std::printf("| %s | %lld | %lld | %.1f | %.1f | %.2f |\n", r.mode.c_str(),
                static_cast<long long>(r.T), static_cast<long long>(r.head_chunk),
                mib(r.head_block), mib(r.logits_peak),
                static_cast<double>(r.logits_peak) / static_cast<double>(r.head_block));
  }
  std::printf("\nledger breakdown at the peak (MiB)\n| mode | T |");
  for (int c = 0; c < kNumCategories; ++c) std::printf(" %s |", category_name(static_cast<Category>(c)));
  std::printf("\n|---|---|");
  for (int c = 0; c < kNumCategories; ++c) std::printf("---|");
  std::printf("\n");
  for (const Run& r : runs) {
    std::printf("| %s | %lld |", r.mode.c_str(), static_cast<long long>(r.T));
    for (int c = 0; c < kNumCategories; ++c) std::printf(" %.1f |", mib(r.breakdown.bytes[static_cast<size_t>(c)]));
    std::printf("\n");
  }

  if (!a.json.empty()) {
    nlohmann::json j;
    j["sgemm_gflops"] = sgemm;
    j["sgemm_gflops_probes"] = sgemm_probes;
    j["model"] = a.model;
    j["objective"] = a.objective.describe();
    j["threads"] = cpu_threads();
    j["runs"] = nlohmann::json::array();
    for (const Run& r : runs) {
      nlohmann::json jr = {{"mode", r.mode},
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
                           {"head_block_logits_bytes", r.head_block}};
      if (r.analytic > 0) jr["analytic_activation_peak_bytes"] = r.analytic;
      for (int c = 0; c < kNumCategories; ++c)
        jr["breakdown"][category_name(static_cast<Category>(c))] = r.breakdown.bytes[static_cast<size_t>(c)];
      j["runs"].push_back(jr);
    }
    std::ofstream out(a.json);
    out << j.dump(2) << "\n";
    if (!out) throw InputError(a.json + ": cannot write");
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("bench", "Time and memory of a training step per mode and T");
  c->add_option("--model", a->model, "Model directory, config.json or preset")->required();
  c->add_option("--seq-len", a->seq_lens, "Comma-separated sequence lengths");
  c->add_option("--modes", a->modes, "Comma-separated modes");
  c->add_option("--layer-chunk", a->layer_chunk, "Stream-mode chunk (default T/4)");
  c->add_option("--head-chunk", a->head_chunk, "LM-head chunk in chunked modes");
  c->add_option("--layers", a->layers, "Override the number of layers (random weights)");
  c->add_option("--repeat", a->repeat, "Timed steps per run (median reported)")
      ->check(CLI::PositiveNumber);
  c->add_option("--warmup", a->warmup, "Untimed steps before the timed ones");
  c->add_option("--threads", a->threads, "Threads (default: all)");
  c->add_option("--seed", a->seed, "Seed for weights and batch");
  c->add_option("--json", a->json, "Write the results as JSON");
  c->add_option("--objective", a->objective.objective, "sft, dpo, grpo or ppo");
  c->add_option("--segments", a->segments,
                "Sequences in the batch (default: sft 1, dpo 2 = one pair, grpo one group, ppo 2)");
  c->add_option("--dpo-loss", a->objective.dpo_loss, "DPO loss: sigmoid, hinge or ipo");
  c->add_option("--grpo-loss", a->objective.grpo_loss, "GRPO loss_type: grpo, bnpo, dr_grpo, dapo");
  c->add_option("--beta", a->objective.beta,
                "DPO beta / GRPO KL coefficient / PPO kl_coef (default 0.1 / 0.04 / 0.05)");
  c->add_option("--group-size", a->objective.group_size, "GRPO completions per prompt");
  c->add_option("--entropy-coef", a->objective.entropy_coef, "GRPO/PPO entropy bonus");
  c->callback([a] { run(*a); });
}

}  // namespace sbp::cli
