// streambp gradcheck: one step of an objective (sft, dpo, grpo, ppo) per mode on one random
// batch of that objective's shape, every gradient against base.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cpu_threads.h"
#include "check/gradcheck.h"
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

namespace sbp::cli {

namespace {

constexpr ExecFlags kGradcheckExec{.mode_list = true,
                                   .mode_help =
                                       "each compared against base (base, checkpoint, stream or "
                                       "<store|recompute|stream>+<full|chunked>)",
                                   .chunks = ChunkDefault::uneven};
ExecArgs gradcheck_exec() {
  ExecArgs e;
  e.modes = "checkpoint,stream,recompute+chunked";
  return e;
}

struct Args {
  std::string model;
  int64_t seq_len = 256;
  int64_t segments = 0;              // 0: the objective's least (sft 1, dpo a pair, grpo one group)
  ExecArgs exec = gradcheck_exec();  // --modes, chunks (T/4 + 1, T/3 + 1), --precision
  int64_t layers = 0;
  uint64_t seed = 0;
  bool mask = false;
  std::string json;
  double tolerance = 1e-4;
  ObjectiveArgs objective;
  LoraArgs lora;
  int64_t cp = 1;  // context parallelism: the ranks of `mpirun -np cp` share the rows
};

int run(const Args& a) {
  check_output_dir("--json", a.json);
  refuse_output_over_inputs({"--json", a.json}, {{"--model", a.model}});
  // --cp N: one context group of the N ranks of `mpirun -np N`; rank 0 reports for all.
  const std::unique_ptr<Communicator> world = context_group_from_flag(a.cp, "gradcheck");
  a.exec.set_threads();
  warn_if_generic_blas();
  if (a.seq_len < 2) throw InputError("--seq-len must be at least 2");
  const ModelSource src = resolve_model(a.model, a.layers);
  const std::unique_ptr<Backend> be = a.exec.make_backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  // Random weights with perturbed norms and biases, so every parameter gets a gradient.
  const ParameterSet w = materialize_weights(src, pool, a.seed, InitStyle::test);
  GradcheckOptions opts;
  opts.objective = a.objective.setup();
  opts.group_size = a.objective.group_size;
  opts.precision = a.exec.precision_value();
  opts.lora = a.lora.config();
  opts.context = world.get();
  if (opts.objective.traits().completions && a.seq_len < 4)
    throw InputError(std::string("--seq-len must be at least 4 for ") +
                     objective_name(opts.objective.kind));
  check_segments(a.seq_len, a.segments);
  const Batch batch =
      !opts.objective.traits().completions
          ? random_batch(src.cfg.vocab_size, a.seq_len, a.segments, a.seed, a.mask)
          : random_objective_batch(opts.objective.kind, a.objective.group_size, src.cfg.vocab_size,
                                   a.seq_len, a.segments, a.seed);
  opts.seed = a.seed;
  a.exec.configs(ChunkDefault::uneven, 0, opts.precision);  // a bad mode fails here
  // DPO and GRPO pack whole groups: a count that is no multiple would silently run another.
  const auto ran = static_cast<int64_t>(batch.seq_lens.size());
  if (a.segments > 0 && ran != a.segments) {
    const int64_t g = objective_group(opts.objective.kind, a.objective.group_size, ran);
    throw InputError("--segments " + std::to_string(a.segments) + ": " +
                     objective_name(opts.objective.kind) + " packs whole groups of " +
                     std::to_string(g) + " sequences in " + std::to_string(a.seq_len) +
                     " tokens, so it would run " + std::to_string(ran) + "; give a multiple of " +
                     std::to_string(g));
  }
  const int64_t T = batch.size();
  // Chunks that split the batch (cli/exec_args.h ChunkDefault::uneven).
  opts.modes = a.exec.configs(ChunkDefault::uneven, T, Precision::fp32);
  const GradcheckResult r = run_gradcheck(*be, src.cfg, w, batch, opts);

  std::printf("gradcheck: %s (%s), objective %s, T=%lld in %zu segment(s), seed %llu\n",
              a.model.c_str(), model_type_name(src.cfg.model_type), a.objective.describe().c_str(),
              static_cast<long long>(a.seq_len), batch.seq_lens.size(),
              static_cast<unsigned long long>(a.seed));
  if (world)
    std::printf("context parallel: %d ranks share each mode's rows (base: every rank alone)\n",
                world->size());
  if (opts.lora.enabled())
    std::printf("lora: %s; base weights frozen, reference = base with adapters off\n",
                opts.lora.describe().c_str());
  std::printf("%-20s %8s %8s %14s %12s %12s\n", "mode", "l_chunk", "h_chunk", "loss", "loss_relerr",
              "max_relerr");
  std::printf("%-20s %8s %8s %14.8f %12s %12s\n", "base", "-", "-", r.base_loss, "-", "-");
  for (const ModeResult& m : r.modes) {
    std::printf("%-20s %8lld %8lld %14.8f %12.3e %12.3e\n", m.mode.c_str(),
                static_cast<long long>(m.layer_chunk), static_cast<long long>(m.head_chunk), m.loss,
                m.loss_rel_err, m.max_rel_err);
  }
  std::printf("\nbase metrics:");
  for (const auto& [k, v] : r.base_metrics) std::printf(" %s=%.6g", k.c_str(), v);
  // A NaN anywhere (a loss, an error) fails: every comparison with NaN is false, and a max over
  // errors can drop it, so finiteness is checked on its own.
  bool finite = std::isfinite(r.base_loss) && std::isfinite(r.max_rel_err);
  for (const ModeResult& m : r.modes)
    finite = finite && std::isfinite(m.loss) && std::isfinite(m.loss_rel_err) &&
             std::isfinite(m.max_rel_err);
  for (const auto& [name, err] : r.per_param) finite = finite && std::isfinite(err);
  bool ok = finite && r.max_rel_err <= a.tolerance;
  // A tensor whose base gradient is negligible next to the model's largest is judged against
  // kNegligibleGradient of that largest (gradcheck.h): say so where it happens.
  auto negligible = [&](const std::string& name) {
    const double f = r.base_fraction.at(name);
    if (f >= kNegligibleGradient) return std::string();
    char buf[96];
    std::snprintf(buf, sizeof buf, "  (max |g_base| %.1e of the largest: against %.0e of it)", f,
                  kNegligibleGradient);
    return std::string(buf);
  };
  if (opts.precision == Precision::fp32) {
    std::printf(
        "\n\nper parameter (worst over modes): max |g - g_base| / max(max |g_base|, %.0e x the "
        "model's largest)\n",
        kNegligibleGradient);
    for (const auto& [name, err] : r.per_param)
      std::printf("  %-60s %.3e%s\n", name.c_str(), err, negligible(name).c_str());
    std::printf("\nmax_rel_err %.3e  (%s, tolerance %.0e)\n", r.max_rel_err, ok ? "PASS" : "FAIL",
                a.tolerance);
  } else {
    // bf16: each mode against base in bf16, next to what bf16 rounding alone does (base in bf16
    // against base in fp32). A mode passes a parameter when it is no farther from base than that.
    std::printf("\n\nper parameter: worst mode vs base(bf16), and base(bf16) vs base(fp32)\n");
    ok = true;
    for (const auto& [name, err] : r.per_param) {
      const double rounding = r.rounding.at(name);
      const bool within = err <= std::max(rounding, a.tolerance);
      ok = ok && within;
      std::printf("  %-60s %.3e  %.3e%s%s\n", name.c_str(), err, rounding, within ? "" : "  FAIL",
                  negligible(name).c_str());
    }
    ok = ok && finite;
    std::printf("\nevery mode within bf16 rounding of base: %s\n", ok ? "PASS" : "FAIL");
  }
  if (!finite) std::printf("a loss or gradient error is not finite (NaN or inf): FAIL\n");

  if (!a.json.empty() && (!world || world->rank() == 0)) {
    nlohmann::json j;
    j["max_rel_err"] = r.max_rel_err;
    j["objective"] = a.objective.describe();
    j["loss"]["base"] = r.base_loss;
    j["base_metrics"] = r.base_metrics;
    for (const ModeResult& m : r.modes) j["loss"][m.mode] = m.loss;
    j["per_param"] = nlohmann::json::object();
    for (const auto& [name, err] : r.per_param) j["per_param"][name] = err;
    j["base_grad_fraction"] = r.base_fraction;  // max |g_base| / the model's largest
    j["precision"] = enum_name<Precision>(kPrecisionNames, opts.precision);
    if (!r.rounding.empty()) j["bf16_rounding_per_param"] = r.rounding;
    if (opts.lora.enabled()) {
      j["lora"] = opts.lora.describe();
      // Every mode's peak of the ledger's `grads` category: the adapters' (+ a PPO value
      // model's) gradients only, never the base weights'.
      for (const ModeResult& m : r.modes) j["grads_bytes"][m.mode] = m.grads_bytes;
    }
    j["pass"] = ok;
    write_file_atomically(a.json, j.dump(2) + "\n");
  }
  return ok ? 0 : 1;
}

}  // namespace

void register_gradcheck(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "gradcheck",
      "Run one step of an objective in each mode on a random batch and compare gradients to base");
  c->add_option("--model", a->model, "Model directory, config.json or preset")->required();
  c->add_option("--seq-len", a->seq_len, "Tokens in the batch")->check(int_in(2, kMaxFlagInt));
  c->add_option("--segments", a->segments, "Number of packed sequences")
      ->check(int_in(1, kMaxFlagInt));
  a->exec.add_flags(c, kGradcheckExec);
  c->add_option("--layers", a->layers, "Override the number of layers (random weights)")
      ->check(int_in(1, kMaxFlagInt));
  c->add_option("--seed", a->seed, "Seed for weights and batch")->check(uint64_flag());
  c->add_flag("--mask", a->mask, "Mask about a third of the targets at random");
  c->add_option("--tolerance", a->tolerance, "Exit non-zero above this relative error")
      ->check(positive_finite(1e3));
  c->add_option("--json", a->json, "Write the result as JSON")->check(non_empty());
  a->objective.add_flags(c);
  a->lora.add_flags(c);
  c->add_option("--cp", a->cp,
                "Context parallelism: under mpirun -np N, --cp N splits every mode's rows (not "
                "base's) across the N ranks and sums their gradients before the comparison")
      ->check(int_in(1, 4096));
  c->callback([a] {
    const int rc = run(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli
