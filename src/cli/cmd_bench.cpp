// streambp bench: time and memory of one training step per (mode, T), with the machine's
// sgemm speed measured in the same run as the yardstick for achieved GFLOP/s.
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
#include "objective/sft.h"

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
};

struct Run {
  std::string mode;
  int64_t T = 0, layer_chunk = 0, head_chunk = 0;
  double median_s = 0, tokens_per_s = 0, gflops = 0, loss = 0;
  int64_t peak = 0, activation_peak = 0, rss_peak = 0, analytic = 0;
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
  const double sgemm = measure_sgemm_gflops();
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  const ParameterSet w = materialize_weights(src, pool, a.seed, InitStyle::hf);
  std::vector<Run> runs;
  for (int64_t T : lens) {
    const Batch batch = random_batch(src.cfg.vocab_size, T, 1, a.seed, false);
    for (ExecConfig exec : modes) {
      exec.layer_chunk = a.layer_chunk > 0 ? a.layer_chunk : std::max<int64_t>(1, (T + 3) / 4);
      exec.head_chunk = a.head_chunk;
      Run r;
      r.mode = mode_name(exec);
      r.T = T;
      r.layer_chunk = exec.layer_chunk_for(T);
      r.head_chunk = exec.head_chunk_for(T);
      std::fprintf(stderr, "bench: %s T=%lld ...\n", r.mode.c_str(), static_cast<long long>(T));
      ParameterSet g(src.cfg, pool, Category::grads, DType::F32, true);
      Engine engine(src.cfg, w, be, pool, exec);
      reset_peak_rss();
      ledger.reset_peak();
      std::vector<double> times;
      int64_t flops = 0;
      for (int i = 0; i < a.warmup + a.repeat; ++i) {
        SftObjective obj(batch, batch.loss_weight_sum());
        be.reset_flops();
        const auto t0 = std::chrono::steady_clock::now();
        engine.forward_backward(batch, obj, g);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i >= a.warmup) times.push_back(s);
        flops = be.flops();
        r.loss = obj.loss();
      }
      std::sort(times.begin(), times.end());
      r.median_s = times[times.size() / 2];
      r.tokens_per_s = static_cast<double>(T) / r.median_s;
      r.gflops = static_cast<double>(flops) / r.median_s / 1e9;
      r.peak = ledger.peak();
      r.breakdown = ledger.peak_breakdown();
      r.activation_peak = r.peak - r.breakdown[Category::weights] -
                          r.breakdown[Category::grads] - r.breakdown[Category::optimizer];
      r.rss_peak = peak_rss_bytes();
      if (exec.layers == LayerMode::stream && exec.head == HeadMode::chunked) {
        r.analytic = stream_memory_terms(src.cfg, T, r.layer_chunk, r.head_chunk, exec.act_dtype)
                         .activation_peak();
      }
      runs.push_back(r);
    }
  }

  std::printf("bench: %s (%s, %lld layers), %d thread(s), median of %d step(s)\n",
              a.model.c_str(), src.cfg.model_type.c_str(),
              static_cast<long long>(src.cfg.num_hidden_layers), cpu_threads(), a.repeat);
  std::printf("sgemm: %.1f GFLOP/s (2048^3, same run)\n\n", sgemm);
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
    j["model"] = a.model;
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
                           {"loss", r.loss}};
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
  c->callback([a] { run(*a); });
}

}  // namespace sbp::cli
