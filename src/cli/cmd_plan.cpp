// streambp plan: the memory of a training step by shape-only execution of the engine's own
// code (DESIGN §4). With --seq-len: the peak and its breakdown per mode. With --budget alone:
// the longest T each mode can train, with the chunk sizes it would use.
#include <bit>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command_output.h"
#include "cli/commands.h"
#include "cli/exec_args.h"
#include "cli/flag_checks.h"
#include "cli/lora_args.h"
#include "cli/model_source.h"
#include "cli/objective_args.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/output_paths.h"
#include "engine/context_slice.h"
#include "plan/planner.h"
#include "plan/size_arg.h"
#include "plan/gpu_profiles.h"
#include "plan/time_plan.h"

namespace sbp::cli {

namespace {

constexpr ExecFlags kPlanExec{.mode_list = true,
                              .chunks = ChunkDefault::planned,
                              .grad_dtype = true,
                              .runs = false,
                              .offload_optimizer = true};
ExecArgs plan_exec() {
  ExecArgs e;
  e.modes = "base,checkpoint,stream";
  e.precision = "bf16";
  return e;
}

struct Args {
  std::string model;
  ExecArgs exec = plan_exec();  // --modes, chunks (auto), --precision (bf16), --grad-dtype
  std::string budget;
  std::string host_budget;  // the host memory offloaded bytes may use (--offload)
  std::string reserve = "2GiB";
  std::string optimizer = "none";
  ObjectiveArgs objective;
  int64_t seq_len = 0;
  int64_t layers = 0;
  int ranks = 1;
  bool ranks_given = false;  // --ranks on the command line (1 is also its default)
  int zero = 0;
  int cp = 1;  // context parallelism: ranks sharing each sequence
  std::string json;
  int64_t prompt_len = 0;             // online GRPO/PPO: the generation phase's prompt
  int64_t num_generations = 8;        // online GRPO/PPO: completions per prompt, decoded together
  int64_t max_completion_length = 0;  // and new tokens (0: no generation phase)
  LoraArgs lora;
  bool time = false;           // --time: the step's predicted time (plan/time_plan.h)
  std::string device = "cpu";  // --device: what --time prices the step on
};

// One mode's line of the report.
struct Row {
  std::string mode;
  ExecConfig exec;
  ChunkedPlan plan;
  bool hit_limit = false;
  std::shared_ptr<TimePlan> time;  // with --time
};

// Bytes in the table's unit.
struct Unit {
  const char* name;
  double scale;
};
Unit unit_for(int64_t largest) {
  if (largest >= (int64_t{1} << 30)) return {"GiB", 1024.0 * 1024.0 * 1024.0};
  return {"MiB", 1024.0 * 1024.0};
}

// `host`: a column for the host space's peak (offload).
void print_table(const std::vector<Row>& rows, bool search, bool budgeted, bool host) {
  int64_t largest = 0;
  for (const Row& r : rows)
    largest = std::max({largest, r.plan.step.peak_bytes, r.plan.step.host_peak_bytes});
  const Unit u = unit_for(largest);
  std::printf("| mode | %s | layer chunk | head chunk | peak %s |%s%s", search ? "longest T" : "T",
              u.name, host ? " host peak |" : "", budgeted && !search ? " fits |" : "");
  for (int c = 0; c < kNumCategories; ++c)
    std::printf(" %s |", category_name(static_cast<Category>(c)));
  std::printf("\n|---|---:|---:|---:|---:|%s%s", host ? "---:|" : "",
              budgeted && !search ? "---|" : "");
  for (int c = 0; c < kNumCategories; ++c) std::printf("---:|");
  std::printf("\n");
  for (const Row& r : rows) {
    const ChunkedPlan& p = r.plan;
    std::printf("| %s | %s%lld | %lld | %lld | %.2f |", r.mode.c_str(), r.hit_limit ? ">= " : "",
                static_cast<long long>(p.seq_len), static_cast<long long>(p.layer_chunk),
                static_cast<long long>(p.head_chunk),
                static_cast<double>(p.step.peak_bytes) / u.scale);
    if (host) std::printf(" %.2f |", static_cast<double>(p.step.host_peak_bytes) / u.scale);
    if (budgeted && !search) std::printf(" %s |", p.fits ? "yes" : "NO");
    for (int c = 0; c < kNumCategories; ++c)
      std::printf(" %.2f |",
                  static_cast<double>(p.step.breakdown.bytes[static_cast<size_t>(c)]) / u.scale);
    std::printf("\n");
  }
  if (!host) return;
  // The host space's own breakdown at its peak: what waits there (checkpoints, the residual
  // gradient), and with offload optimizer the optimizer (moments, master weights), the
  // gradient sums and the host's copy of the weights.
  std::printf("\nhost memory at its peak (%s)\n| mode |", u.name);
  for (int c = 0; c < kNumCategories; ++c)
    std::printf(" %s |", category_name(static_cast<Category>(c)));
  std::printf("\n|---|");
  for (int c = 0; c < kNumCategories; ++c) std::printf("---:|");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("| %s |", r.mode.c_str());
    for (int c = 0; c < kNumCategories; ++c)
      std::printf(" %.2f |", static_cast<double>(
                                 r.plan.step.host_breakdown.bytes[static_cast<size_t>(c)]) /
                                 u.scale);
    std::printf("\n");
  }
}

// The command line, parsed and checked.
struct Request {
  PlanSetup setup;
  int64_t budget = 0, reserve = 0;  // as given (setup.budget = budget - reserve)
  Offload offload;
  ChunkRequest chunks;
  std::vector<ExecConfig> modes;
  bool search = false;  // no --seq-len: the longest T under the budget
};

// --zero 3 plans what `streambp train` runs with dist.zero 3 (dist/sharded_weights.h): full
// fine-tuning with SFT on data-parallel ranks; the rest is refused, as the trainer refuses it.
void check_plan_zero3(const PlanSetup& setup, bool lora) {
  auto refuse = [](const std::string& what) {
    throw InputError("--zero 3: " + what + " is not supported with sharded weights yet (use "
                     "--zero 2)");
  };
  if (setup.objective.kind != ObjectiveKind::sft)
    refuse(std::string("--objective ") + setup.objective.traits().name);
  if (lora) refuse("--lora-r");
}

Request parse_request(const Args& a) {
  Request q;
  PlanSetup& setup = q.setup;
  setup.objective = a.objective.setup();
  setup.group_size = a.objective.group_size;
  setup.cfg = resolve_model(a.model, a.layers).cfg;
  setup.param_dtype = setup.act_dtype = storage_dtype(a.exec.precision_value());
  setup.grad_dtype = a.exec.grad_dtype_value();
  if (a.optimizer == "adamw")
    setup.adamw = true;
  else if (a.optimizer != "none")
    throw InputError("--optimizer: unknown optimizer '" + a.optimizer + "' (use none or adamw)");
  setup.master_weights = true;  // counted with adamw + bf16 (docs/BENCHMARKS.md says why)
  if (a.ranks < 1 || a.ranks > kMaxPlanningRanks)  // int_in checks it too, when given
    throw InputError("--ranks: must be between 1 and " + std::to_string(kMaxPlanningRanks));
  if (a.zero < 0 || a.zero > 3)
    throw InputError(
        "--zero: must be 0 (replicated optimizer), 1 (sharded optimizer state), 2 (sharded "
        "gradients too) or 3 (sharded weights too)");
  setup.ranks = a.ranks;
  if (a.cp > 1 && a.ranks_given && a.ranks < a.cp)
    throw InputError("--cp " + std::to_string(a.cp) + " and --ranks " + std::to_string(a.ranks) +
                     ": --ranks counts every rank, so it must be a multiple of --cp (or omit "
                     "--ranks to plan --cp ranks)");
  if (a.cp > 1) {
    // --ranks counts every rank (data x context); alone, --cp N plans N ranks on one sequence.
    setup.ranks = a.ranks == 1 ? a.cp : a.ranks;
    if (setup.ranks % a.cp != 0)
      throw InputError("--cp " + std::to_string(a.cp) + ": must divide --ranks " +
                       std::to_string(setup.ranks) + " (ranks = data-parallel groups x --cp)");
    setup.context_parallel = a.cp;
  }
  setup.zero = setup.ranks > 1 ? a.zero : 0;
  if (setup.zero == 3) check_plan_zero3(setup, a.lora.config().enabled());
  if (a.prompt_len > 0 && a.max_completion_length == 0)
    throw InputError("--prompt-len: plans the generation phase with --max-completion-length");
  if (a.max_completion_length > 0) {
    if (!setup.objective.traits().rollouts)
      throw InputError(
          "--max-completion-length: a generation phase is planned for online grpo "
          "and ppo only (--objective grpo|ppo)");
    if (a.prompt_len < 1) throw InputError("--prompt-len: the prompt's tokens, at least 1");
    // The generation's own check names max_new_tokens; here the flags are named.
    const int64_t per_sequence = a.prompt_len + a.max_completion_length;  // each < 2^31 + 1
    if (per_sequence > setup.cfg.max_position_embeddings)
      throw InputError("--max-completion-length: --prompt-len " + std::to_string(a.prompt_len) +
                       " + --max-completion-length " + std::to_string(a.max_completion_length) +
                       " exceeds the model's max_position_embeddings (" +
                       std::to_string(setup.cfg.max_position_embeddings) + ")");
    if (per_sequence > kMaxPlanningGenerationTokens / a.num_generations)
      throw InputError("--num-generations: " + std::to_string(a.num_generations) +
                       " completions of " + std::to_string(per_sequence) +
                       " tokens exceed the 2^27 tokens of generation the planner takes");
    setup.generate_prompt_tokens = a.prompt_len;
    setup.generate_new_tokens = a.max_completion_length;
    setup.generate_sequences = a.num_generations;
  }
  setup.lora = a.lora.config();
  if (setup.lora.enabled() && setup.ranks > setup.context_parallel)
    throw InputError(
        "--lora-r: LoRA is planned on one process or one context group (no --ranks "
        "beyond --cp)");
  if (setup.lora.enabled()) {  // the adapters are whole on every rank: nothing is divided
    setup.ranks = 1;
    setup.zero = 0;
  }
  if (!a.budget.empty()) {
    q.budget = parse_size(a.budget, "--budget");
    if (q.budget == 0) throw InputError("--budget: must be > 0; omit it to plan without a budget");
    q.reserve = parse_size(a.reserve, "--reserve");
    if (q.reserve >= q.budget)
      throw InputError("--reserve: " + format_bytes(q.reserve) + " leaves nothing of the " +
                       format_bytes(q.budget) + " budget");
    setup.budget = q.budget - q.reserve;
  }
  q.offload = a.exec.offload_value();
  if (q.offload.optimizer && !setup.adamw)
    throw InputError("--offload optimizer: there is no optimizer state to offload (give "
                     "--optimizer adamw)");
  if (!a.host_budget.empty()) {
    if (!q.offload.any())
      throw InputError("--host-budget: nothing is offloaded (give --offload checkpoints)");
    if (setup.budget == 0)
      throw InputError("--host-budget: applies with a device budget (give --budget too)");
    setup.host_budget = parse_size(a.host_budget, "--host-budget");
    // 0 used to mean "no host budget": the flag's absence says that.
    if (setup.host_budget == 0)
      throw InputError("--host-budget: must be > 0; omit it for no host budget");
  }
  if (a.seq_len == 0 && setup.budget == 0)
    throw InputError(
        "--seq-len or --budget: give a sequence length to plan, a budget to search the longest "
        "sequence "
        "under, or both");
  const int64_t min_T = min_planning_tokens(setup.objective.kind, setup.group_size);
  const int64_t max_T = max_planning_tokens(setup.objective.kind);
  if (min_T > max_T)  // a GRPO group of at least 2 tokens a completion
    throw InputError("--group-size: " + std::to_string(setup.group_size) +
                     " completions of at least 2 tokens exceed the " + std::to_string(max_T) +
                     " tokens plan takes for objective " + objective_name(setup.objective.kind));
  if (a.seq_len != 0 && (a.seq_len < min_T || a.seq_len > max_T))
    throw InputError("--seq-len: must be between " + std::to_string(min_T) + " and " +
                     std::to_string(max_T) + " for objective " +
                     objective_name(setup.objective.kind) + ", got " + std::to_string(a.seq_len));
  q.chunks = ChunkRequest{a.exec.layer_chunk_rows(), a.exec.head_chunk_rows()};
  q.modes = a.exec.configs(ChunkDefault::planned, 0, a.exec.precision_value());
  if (setup.context_parallel > 1) {
    // A store mode keeps every activation of the whole sequence: no context parallelism.
    std::erase_if(q.modes, [](const ExecConfig& m) { return m.layers == LayerMode::store; });
    if (q.modes.empty())
      throw InputError("--cp: context parallelism plans the checkpoint and stream modes (--modes)");
  }
  q.search = a.seq_len == 0;
  return q;
}

// Why not even the smallest step fits: the host budget when the device peak fits (its numbers,
// not the device budget's), else the device budget (explain_too_small).
std::string explain_no_fit(const PlanSetup& setup, const ExecConfig& mode) {
  const int64_t T = min_planning_tokens(setup.objective.kind, setup.group_size);
  const PlannedStep need = plan_at(setup, mode, T);
  if (setup.host_budget > 0 && need.peak_bytes <= setup.budget &&
      need.host_peak_bytes > setup.host_budget)
    return "--host-budget: the usable host budget of " + format_bytes(setup.host_budget) +
           " cannot hold even a " + std::to_string(T) + "-token step in mode " + mode_name(mode) +
           ", which offloads " + format_bytes(need.host_peak_bytes) +
           " to host memory (its device peak of " + format_bytes(need.peak_bytes) +
           " fits the usable --budget " + format_bytes(setup.budget) + ")";
  return "--budget: " + explain_too_small(setup, mode);
}

std::vector<Row> plan_rows(const Request& q, int64_t seq_len) {
  std::vector<Row> rows;
  for (const ExecConfig& mode : q.modes) {
    Row r;
    r.mode = mode_name(mode);
    r.exec = mode;
    if (q.search) {
      // The search's ceiling, 2^22 tokens, is per rank's share with context parallelism.
      const int64_t ceiling = std::min<int64_t>(
          int64_t{1} << 22 << std::bit_width(static_cast<unsigned>(q.setup.context_parallel - 1)),
          max_planning_tokens(q.setup.objective.kind));
      const MaxLenResult m = find_max_seq_len(q.setup, mode, q.chunks, {}, ceiling);
      if (!m.fits_at_all) throw InputError(explain_no_fit(q.setup, mode));
      r.plan = m.plan;
      r.hit_limit = m.hit_limit;
    } else {
      r.plan = choose_chunks(q.setup, mode, seq_len, q.chunks);
    }
    rows.push_back(r);
  }
  return rows;
}

// Context parallelism at T: the planned rank's rows and the per-rank attention work of one
// sequence of T (the planning step's shape for sft; the others pack their sequences, which the
// work counts as one here too: a bound on the imbalance of the shape plan runs).
struct Balance {
  int64_t rows = 0;
  std::vector<int64_t> work;
  double ratio = 1.0;
};
Balance balance(const PlanSetup& setup, int64_t T) {
  Balance b;
  const int C = setup.context_parallel;
  b.rows = ContextSlice(T, C, 0).local_rows(busiest_rank(T, C));
  const std::vector<int64_t> one{T};
  b.work = attention_work(ContextSlice(T, C, 0), one);
  const auto [lo, hi] = std::minmax_element(b.work.begin(), b.work.end());
  b.ratio = *lo > 0 ? static_cast<double>(*hi) / static_cast<double>(*lo) : 1.0;
  return b;
}

void print_report(const Args& a, const Request& q, const std::vector<Row>& rows, double seconds) {
  const PlanSetup& setup = q.setup;
  const ModelConfig& cfg = setup.cfg;
  const double n_params = static_cast<double>(cfg.num_parameters());
  char params[32];
  if (n_params >= 1e9)
    std::snprintf(params, sizeof params, "%.2f B", n_params / 1e9);
  else
    std::snprintf(params, sizeof params, "%.2f M", n_params / 1e6);
  std::printf(
      "plan: %s (%s, %lld layers, %s parameters), %s weights and activations, %s gradients, "
      "optimizer %s%s, objective %s, batch 1\n",
      a.model.c_str(), model_type_name(cfg.model_type),
      static_cast<long long>(cfg.num_hidden_layers), params, a.exec.precision.c_str(),
      a.exec.grad_dtype.c_str(), a.optimizer.c_str(),
      setup.adamw
          ? (setup.param_dtype == DType::F32 ? " (fp32 m, v)" : " (fp32 m, v and master weights)")
          : "",
      a.objective.describe().c_str());
  if (setup.lora.enabled())
    std::printf(
        "lora: %s; frozen weights (no gradients, no optimizer state), fp32 adapters with their "
        "gradients%s; reference model = the weights with the adapters off\n",
        setup.lora.describe().c_str(), setup.adamw ? " and fp32 AdamW moments" : "");
  if (setup.ranks > 1)
    std::printf(
        "data parallel: %d ranks, zero %d: the memory of one rank (rank 0, whose slices are the "
        "largest)%s\n",
        setup.ranks, setup.zero,
        setup.zero == 0   ? ""
        : setup.zero == 1 ? "; optimizer state divided"
        : setup.zero == 2 ? "; optimizer state and gradients divided"
                          : "; optimizer state, gradients and weights divided (a layer gathered "
                            "at a time, the next one prefetched)");
  if (setup.context_parallel > 1)
    std::printf(
        "context parallel: %d ranks share each sequence (rows in 2 x %d pieces, rank r owning "
        "pieces r and %d - r): the memory of the rank with the most rows; base not planned\n",
        setup.context_parallel, setup.context_parallel, 2 * setup.context_parallel - 1);
  if (setup.budget > 0)
    std::printf("budget %s - reserve %s = %s usable\n", format_bytes(q.budget).c_str(),
                format_bytes(q.reserve).c_str(), format_bytes(setup.budget).c_str());
  std::printf("\n");
  if (q.offload.any())
    std::printf("offload: %s to host memory (%s); peak = device, host peak = host memory\n",
                offload_name(q.offload).c_str(),
                setup.host_budget > 0 ? (format_bytes(setup.host_budget) + " usable").c_str()
                                      : "no host budget");
  std::printf("\n");
  print_table(rows, q.search, setup.budget > 0, q.offload.any());
  const char* what =
      !q.search ? "peak of one step and the ledger's breakdown at that moment"
      : !setup.objective.traits().completions
          ? "longest T: one sequence whose step fits the usable budget"
          : "longest T: the tokens of one micro-batch (its sequences together) whose step fits the "
            "usable budget, with the reference and value models the objective holds";
  std::printf("\n%s; planned in %.2f s by shape-only execution of the engine\n", what, seconds);
  if (setup.generate_new_tokens > 0)
    for (const Row& r : rows)
      std::printf(
          "%s: the generation phase (%lld completions of %lld new tokens after %lld "
          "prompt tokens, decoded together, their KV cache) peaks at %s of the step's %s\n",
          r.mode.c_str(), static_cast<long long>(setup.generate_sequences),
          static_cast<long long>(setup.generate_new_tokens),
          static_cast<long long>(setup.generate_prompt_tokens),
          format_bytes(r.plan.step.generation_peak).c_str(),
          format_bytes(r.plan.step.peak_bytes).c_str());
  for (const Row& r : rows) {
    if (setup.context_parallel <= 1) break;
    const Balance b = balance(setup, r.plan.seq_len);
    std::printf(
        "%s: T = %lld, %lld rows on the planned rank; causal attention work per rank "
        "max / min = %.4f\n",
        r.mode.c_str(), static_cast<long long>(r.plan.seq_len), static_cast<long long>(b.rows),
        b.ratio);
  }
  for (const Row& r : rows) {
    if (!r.plan.fits) {
      if (r.plan.step.peak_bytes > setup.budget)
        std::printf("%s does not fit: it needs %s more than the usable budget\n", r.mode.c_str(),
                    format_bytes(r.plan.step.peak_bytes - setup.budget).c_str());
      else
        std::printf("%s does not fit: it needs %s more host memory than --host-budget\n",
                    r.mode.c_str(),
                    format_bytes(r.plan.step.host_peak_bytes - setup.host_budget).c_str());
    }
  }
  for (const Row& r : rows) {
    const std::string scaling = cfg.rope_scaling_description();
    const long long T = static_cast<long long>(r.plan.seq_len);
    if (scaling.empty() && r.plan.seq_len > cfg.max_position_embeddings &&
        cfg.max_position_embeddings > 0) {
      std::printf(
          "note: %s: T = %lld is beyond the model's %lld trained positions (memory is the same; "
          "quality "
          "needs rope scaling)\n",
          r.mode.c_str(), T, static_cast<long long>(cfg.max_position_embeddings));
      break;
    }
    // With a scaling, name it (memory does not depend on it: the rope table is (T, h) fp32).
    if (!scaling.empty() && r.plan.seq_len > cfg.trained_positions()) {
      // Past max_position_embeddings even the scaled rope was not meant for (dynamic is).
      const std::string past = r.plan.seq_len > cfg.max_position_embeddings &&
                                       cfg.trained_positions() < cfg.max_position_embeddings &&
                                       cfg.rope_scaling.type != RopeScalingType::dynamic
                                   ? ", and past max_position_embeddings " +
                                         std::to_string(cfg.max_position_embeddings)
                                   : "";
      std::printf(
          "note: %s: T = %lld is beyond the model's %lld trained positions; rope scaling in "
          "force: %s%s (memory is the same)\n",
          r.mode.c_str(), T, static_cast<long long>(cfg.trained_positions()), scaling.c_str(),
          past.c_str());
      break;
    }
  }
}

// --time: each mode's predicted step, its time by op family, and what dominates.
void print_time(const std::vector<Row>& rows) {
  if (rows.empty() || !rows.front().time) return;
  const DeviceProfile& dev = rows.front().time->device;
  std::printf("\ntime on %s (%s):\n", dev.name.c_str(), dev.source.c_str());
  std::printf(
      "| mode | T | s/step | tokens/s/device | MFU causal | MFU raw | engine TFLOP | dominant |\n"
      "|---|---:|---:|---:|---:|---:|---:|---|\n");
  for (const Row& r : rows) {
    const StepTime& t = r.time->time;
    std::printf("| %s | %lld | %.4g | %.4g | %.1f%% | %.1f%% | %.4g | %s |\n", r.mode.c_str(),
                static_cast<long long>(r.plan.seq_len), t.seconds, t.tokens_per_s_per_device,
                100.0 * t.mfu_causal, 100.0 * t.mfu_raw, t.engine_flops / 1e12,
                t.dominant.c_str());
  }
  std::printf("\nseconds by op family (op latency included), exposed transfers and collectives\n| mode |");
  for (int f = 0; f < kNumOpFamilies; ++f)
    std::printf(" %s |", op_family_name(static_cast<OpFamily>(f)));
  std::printf(" offload exposed | collectives exposed | adamw update |\n|---|");
  for (int f = 0; f < kNumOpFamilies + 3; ++f) std::printf("---:|");
  std::printf("\n");
  for (const Row& r : rows) {
    const StepTime& t = r.time->time;
    std::printf("| %s |", r.mode.c_str());
    for (int f = 0; f < kNumOpFamilies; ++f) std::printf(" %.3g |", t.family_seconds[size_t(f)]);
    std::printf(" %.3g | %.3g | %.3g |\n", t.offload_exposed_seconds,
                t.collective_exposed_seconds, t.optimizer_seconds);
  }
  std::printf(
      "\nMFU: model FLOPs (6 x matmul parameters per token + attention: 12 L H h per (query, key) "
      "pair) per second per device over the peak (%.4g TFLOP/s%s); causal counts the pairs "
      "causal attention computes (T(T+1)/2 a sequence), raw every pair (T^2, PaLM's formula). "
      "Engine FLOPs include recomputation.\n",
      dev.peak_flops / 1e12, dev.gpu ? ", dense bf16, datasheet" : ", sgemm measured now");
  if (!dev.gpu)
    std::printf(
        "On the CPU the peak is the BLAS's sgemm as measured now: kernels faster than it (the "
        "AVX-512 attention beside an AVX2 BLAS core) can take MFU past 100%%.\n");
}

nlohmann::json time_json(const TimePlan& tp) {
  const StepTime& t = tp.time;
  nlohmann::json j;
  j["device"] = tp.device.name;
  j["device_source"] = tp.device.source;
  j["measured_profile"] = tp.device.measured;
  j["peak_flops"] = tp.device.peak_flops;
  j["seconds"] = t.seconds;
  j["compute_seconds"] = t.compute_seconds;
  j["tokens_per_s_per_device"] = t.tokens_per_s_per_device;
  j["mfu_causal"] = t.mfu_causal;
  j["mfu_raw"] = t.mfu_raw;
  j["engine_flops"] = t.engine_flops;
  j["model_flops_causal"] = tp.shape.model_flops_causal;
  j["model_flops_raw"] = tp.shape.model_flops_raw;
  j["latency_seconds"] = t.latency_seconds;
  j["offload_seconds"] = t.offload_seconds;
  j["offload_exposed_seconds"] = t.offload_exposed_seconds;
  j["collective_seconds"] = t.collective_seconds;
  j["collective_exposed_seconds"] = t.collective_exposed_seconds;
  j["optimizer_seconds"] = t.optimizer_seconds;
  j["dominant"] = t.dominant;
  j["families"] = nlohmann::json::object();
  for (int f = 0; f < kNumOpFamilies; ++f) {
    const OpTotals& o = tp.ops[static_cast<OpFamily>(f)];
    j["families"][op_family_name(static_cast<OpFamily>(f))] = {
        {"seconds", t.family_seconds[size_t(f)]},
        {"calls", o.calls},
        {"flops", o.flops},
        {"bytes", o.bytes}};
  }
  return j;
}

nlohmann::json plan_json(const Args& a, const Request& q, const std::vector<Row>& rows) {
  nlohmann::json j;
  j["model"] = a.model;
  j["dtype"] = a.exec.precision;
  j["grad_dtype"] = a.exec.grad_dtype;
  j["optimizer"] = a.optimizer;
  j["objective"] = a.objective.describe();
  j["ranks"] = q.setup.ranks;
  j["zero"] = q.setup.zero;
  j["context_parallel"] = q.setup.context_parallel;
  if (q.setup.lora.enabled()) j["lora"] = q.setup.lora.describe();
  if (q.setup.budget > 0) {
    j["budget_bytes"] = q.budget;
    j["reserve_bytes"] = q.reserve;
    j["usable_bytes"] = q.setup.budget;
  }
  j["offload"] = offload_name(q.offload);
  if (q.setup.host_budget > 0) j["host_budget_bytes"] = q.setup.host_budget;
  j["modes"] = nlohmann::json::object();
  for (const Row& r : rows) {
    nlohmann::json m;
    if (q.search) {
      m["max_seq_len"] = r.plan.seq_len;
      if (r.hit_limit) m["search_limit_reached"] = true;
    } else {
      m["seq_len"] = r.plan.seq_len;
      if (q.setup.budget > 0) m["fits"] = r.plan.fits;
    }
    m["layer_chunk"] = r.plan.layer_chunk;
    m["head_chunk"] = r.plan.head_chunk;
    m["peak_bytes"] = r.plan.step.peak_bytes;
    if (q.setup.context_parallel > 1) {
      const Balance b = balance(q.setup, r.plan.seq_len);
      m["rank_rows"] = b.rows;
      m["attention_work"] = b.work;
    }
    if (q.setup.generate_new_tokens > 0) m["generation_peak_bytes"] = r.plan.step.generation_peak;
    m["breakdown"] = nlohmann::json::object();
    for (int c = 0; c < kNumCategories; ++c)
      m["breakdown"][category_name(static_cast<Category>(c))] =
          r.plan.step.breakdown.bytes[static_cast<size_t>(c)];
    if (q.offload.any()) {
      m["host_peak_bytes"] = r.plan.step.host_peak_bytes;
      m["host_breakdown"] = nlohmann::json::object();
      for (int c = 0; c < kNumCategories; ++c)
        m["host_breakdown"][category_name(static_cast<Category>(c))] =
            r.plan.step.host_breakdown.bytes[static_cast<size_t>(c)];
    }
    if (r.time) m["time"] = time_json(*r.time);
    j["modes"][r.mode] = m;
  }
  return j;
}

// With `out` (an embedding program, cli/command_output.h): the JSON there, nothing printed.
int run(const Args& a, CommandOutput* out) {
  check_output_dir("--json", a.json);
  refuse_output_over_inputs({"--json", a.json}, {{"--model", a.model}});
  const auto t0 = std::chrono::steady_clock::now();
  const Request q = parse_request(a);
  if (!a.time && a.device != "cpu")
    throw InputError("--device: prices the step with --time (give --time too)");
  if (a.time && a.device != "cpu") (void)gpu_profile(a.device);  // an unknown name, before planning
  std::vector<Row> rows = plan_rows(q, a.seq_len);
  if (a.time) {
    for (Row& r : rows) {
      ExecConfig m = r.exec;
      m.layer_chunk = r.plan.layer_chunk;
      m.head_chunk = r.plan.head_chunk;
      r.time = std::make_shared<TimePlan>(plan_time(q.setup, m, r.plan.seq_len, a.device));
    }
  }
  if (out) {
    out->json = plan_json(a, q, rows);
  } else {
    print_report(a, q, rows,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    print_time(rows);
  }
  if (!a.json.empty()) write_file_atomically(a.json, plan_json(a, q, rows).dump(2) + "\n");
  return 0;
}

}  // namespace

void register_plan(CLI::App& app, CommandOutput* out) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "plan", "Peak memory of a training step, or the longest trainable sequence under a budget");
  c->add_option("--model", a->model, "Model directory, config.json or preset")->required();
  a->exec.add_flags(c, kPlanExec);
  c->add_option("--budget", a->budget, "Device memory, e.g. 80GiB, 2.5GB, 512MiB, bytes")
      ->check(non_empty());
  c->add_option("--host-budget", a->host_budget,
                "Host memory the offloaded bytes may use, e.g. 1TiB (with --budget, --offload)")
      ->check(non_empty());
  c->add_option("--reserve", a->reserve,
                "Part of the budget kept for the runtime (CUDA context, allocator slack)")
      ->capture_default_str()
      ->check(non_empty());
  c->add_option("--optimizer", a->optimizer,
                "none, or adamw: fp32 m and v (and fp32 master weights with --dtype bf16)")
      ->capture_default_str();
  a->objective.add_flags(c);
  a->lora.add_flags(c);
  c->add_option("--seq-len", a->seq_len, "Plan this many tokens (else: search the longest)")
      ->check(int_in(1, std::numeric_limits<int64_t>::max()));  // 0 used to mean "search"
  c->add_option("--layers", a->layers, "Override the number of layers (configs and presets)")
      ->check(int_in(1, kMaxFlagInt));
  c->add_option("--ranks", a->ranks, "Data parallel: plan the memory of one of this many ranks")
      ->capture_default_str()
      ->check(int_in(1, kMaxPlanningRanks));
  c->add_option("--cp", a->cp,
                "Context parallelism: this many of the --ranks share each sequence (default "
                "--ranks = --cp)")
      ->capture_default_str()
      ->check(int_in(1, kMaxPlanningRanks));
  c->add_option(
       "--zero", a->zero,
       "With --ranks > 1: 0 replicated optimizer, 1 AdamW state sharded, 2 gradients sharded too")
      ->capture_default_str();
  c->add_option("--json", a->json, "Write the plan as JSON")->check(non_empty());
  c->add_flag("--time", a->time,
              "Predict the step's time, tokens/s and MFU on --device (by op family)");
  c->add_option("--device", a->device,
                "With --time: cpu (probed now), h100, h200, a100 or rtx4090 (datasheet profiles)")
      ->capture_default_str();
  c->add_option("--max-completion-length", a->max_completion_length,
                "Online grpo/ppo: plan the generation phase too (new tokens per completion)")
      ->check(int_in(1, int64_t{1} << 31));  // absent: no generation phase
  c->add_option("--prompt-len", a->prompt_len, "Online grpo/ppo: prompt tokens of the generation")
      ->check(int_in(1, int64_t{1} << 31));
  c->add_option("--num-generations", a->num_generations,
                "Online grpo/ppo: completions per prompt, decoded together (grpo.num_generations)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  c->callback([a, c, out] {
    a->ranks_given = c->count("--ranks") > 0;
    run(*a, out);
  });
}

}  // namespace sbp::cli
