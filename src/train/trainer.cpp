#include "train/trainer.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include "backend/cpu_threads.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/stop_signal.h"
#include "dist/world.h"
#include "model/checkpoint_io.h"
#include "model/lora_io.h"
#include "train/auto_chunks.h"
#include "train/demo.h"
#include "train/rank_settings.h"
#include "train/resume_check.h"
#include "train/run_data.h"
#include "train/value_model_init.h"

namespace sbp {

namespace {

namespace fs = std::filesystem;

std::string fnv_hex(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// What the run writes goes where the output rule allows (core/output_file.h), checked before
// anything is written or deleted: output_dir is a directory (a file there, or above it, used to
// surface as a failure to open the metrics file), and the metrics and completions files inside
// it are not reached through a symlink (overwrite_output_dir used to truncate a link's target
// outside output_dir).
void check_output_paths(const TrainConfig& c) {
  std::error_code ec;
  for (fs::path p = fs::absolute(c.output_dir, ec).lexically_normal(); !p.empty();
       p = p.parent_path()) {
    const auto type = fs::status(p, ec).type();
    if (type == fs::file_type::not_found) {
      if (p == p.parent_path()) break;
      continue;
    }
    if (type != fs::file_type::directory)
      throw InputError(c.where("output_dir") + ": output_dir " + c.output_dir +
                       " is not a directory" +
                       (p == fs::absolute(c.output_dir, ec).lexically_normal()
                            ? ""
                            : " (" + p.string() + " is not one)"));
    break;
  }
  const auto check = [&](const std::string& key, const std::string& path) {
    try {
      output_target_in(key, path, c.output_dir);
    } catch (const InputError& e) {
      throw InputError(c.where(key) + ": " + e.what());
    }
  };
  check("metrics", c.metrics);
  if (c.log_completions_every > 0) check("output_dir", c.output_dir + "/completions.jsonl");
}

// The model to start from: a Hugging Face directory with weights (its config and directory), or
// a config.json / preset whose weights are drawn from the seed (directory "").
std::pair<ModelConfig, std::string> resolve_starting_model(const TrainConfig& c) {
  const fs::path p(c.model);
  if (fs::is_directory(p)) {
    if (!fs::exists(p / "model.safetensors") && !fs::exists(p / "model.safetensors.index.json")) {
      throw InputError(c.where("model") + ": model: " + c.model +
                       " has no model.safetensors (or index); "
                       "to start from random weights give its config.json instead");
    }
    return {load_config(c.model), c.model};
  }
  if (fs::is_regular_file(p) || has_preset(c.model)) return {resolve_config(c.model), ""};
  throw InputError(c.where("model") + ": model: " + c.model +
                   " does not exist (a Hugging Face model "
                   "directory, a config.json for random weights, or a preset name)");
}

}  // namespace

void RunLog::out(const char* fmt, ...) const {
  if (!lead) return;
  va_list a;
  va_start(a, fmt);
  std::vprintf(fmt, a);
  va_end(a);
}

void RunLog::err(const char* fmt, ...) const {
  if (!lead) return;
  va_list a;
  va_start(a, fmt);
  std::vfprintf(stderr, fmt, a);
  va_end(a);
}

int run_training(const TrainConfig& c, const std::string& resume) {
  return run_training(c, resume, single_process());
}

int run_training(const TrainConfig& c, const std::string& resume, Communicator& comm) {
  if (c.demo) {
    if (comm.size() > 1)
      throw InputError("the built-in demo runs on one process; give a config to train with mpirun");
    if (!resume.empty()) throw InputError("the built-in demo cannot be resumed");
    return run_demo(c.demo_options);
  }
  // Ranks that disagree on what to run would crash, hang or train wrongly in silence: check
  // before anything else talks to the other ranks (dist/rank_agreement.h).
  if (comm.size() > 1) check_ranks_agree(comm, settings_ranks_must_share(c, resume));
  StopSignalScope stop_scope;
  set_cpu_threads(c.threads);
  // A GPU rank of a data-parallel run: its node-local GPU, and NCCL for the gradient and weight
  // collectives where the build has it (else the host communicator, through host copies).
  BackendSpec spec = c.backend;
  if (spec.kind == BackendKind::cuda && comm.size() > 1) spec.device += local_rank();
  std::unique_ptr<Backend> be = make_backend(spec);
  const std::unique_ptr<Communicator> gpu = make_gpu_collectives(comm, *be);  // outlives trainer
  Communicator& world = gpu ? *gpu : comm;
  // Context parallelism: groups of C consecutive ranks share each micro-batch's rows (context
  // group); the ranks at the same place in every group split the batch (data group).
  const int C = c.dist.context_parallel;
  std::unique_ptr<Communicator> context, data;
  if (C > 1) {
    if (comm.size() % C != 0)
      throw InputError(c.where("dist.context_parallel") + ": " + std::to_string(C) +
                       " does not divide the run's " + std::to_string(comm.size()) + " rank" +
                       (comm.size() == 1 ? "" : "s") + " (mpirun -np N with N a multiple of it)");
    context = comm.split(comm.rank() / C, comm.rank());
    data = comm.split(comm.rank() % C, comm.rank());
  }
  // GPU ranks move K/V and dK/dV rows with NCCL over the context group where the build has it
  // (else through host copies over MPI).
  const std::unique_ptr<Communicator> gpu_context =
      context ? make_gpu_collectives(*context, *be) : nullptr;
  Communicator* rows = gpu_context ? gpu_context.get() : context.get();
  Trainer trainer(c, resume, RunRanks{world, data ? *data : world, rows}, std::move(be));
  return trainer.run();
}

Trainer::Trainer(const TrainConfig& c, const std::string& resume, Communicator& comm)
    : Trainer(c, resume, RunRanks{comm, comm, nullptr}, make_backend(c.backend)) {}

Trainer::Trainer(const TrainConfig& c, const std::string& resume, RunRanks ranks,
                 std::unique_ptr<Backend> backend)
    : c_(c),
      world_(ranks.world),
      comm_(ranks.data),
      context_(ranks.context),
      log_{ranks.world.rank() == 0},
      metrics_(ranks.world),
      setup_(c.objective_setup()),
      be_(std::move(backend)) {
  check_output_paths(c_);  // before minutes of loading: nothing is written by it
  load_inputs(resume);
  plan_schedule();
  build_models();
  // Every input is valid: now what the run would overwrite (nothing is written before this).
  // The run's inputs: overwrite_output_dir must not delete any of them.
  std::vector<NamedPath> inputs;
  for (const TrainConfig::Input& in : c_.inputs()) inputs.push_back({in.key, in.path});
  inputs.push_back({"the config", c_.source});
  claim_output_dir(c_.output_dir, c_.metrics, start_.ckpt, c_.overwrite_output_dir, log_.lead,
                   inputs);
  print_summary();
}

// The starting model, the checkpoint's state when resuming, and the data.
void Trainer::load_inputs(const std::string& resume) {
  std::tie(start_.policy, start_.dir) = resolve_starting_model(c_);
  start_.policy = extend_context(start_.policy, c_.context, c_.where("context.rope_scaling"));
  if (!resume.empty()) {
    start_.ckpt = resolve_resume_dir(resume);
    start_.resumed = read_trainer_state(start_.ckpt);
  }
  if (setup_.needs_value_model() && start_.ckpt.empty()) check_ppo_value_model(c_, start_.policy);
  data_.emplace(c_, start_.policy, comm_, start_.ckpt, start_.resumed, log_);
}

// The run's length (max_steps, or the steps of `epochs` epochs) and its LR schedule. Every rank
// builds the same plan; a step takes ranks x grad_accum micro-batches of it.
void Trainer::plan_schedule() {
  per_step_ = c_.grad_accum * comm_.size();
  const int64_t total = data_->total_steps(per_step_);
  const int64_t warmup =
      c_.warmup_steps > 0
          ? c_.warmup_steps
          : static_cast<int64_t>(std::ceil(c_.warmup_ratio * static_cast<double>(total)));
  schedule_ = LrSchedule{.kind = c_.schedule,
                         .lr = c_.lr,
                         .warmup_steps = warmup,
                         .total_steps = total,
                         .min_lr_ratio = c_.min_lr_ratio};
  schedule_.validate(c_.where("schedule.type"));
  optim_ = AdamWConfig{.beta1 = static_cast<float>(c_.beta1),
                       .beta2 = static_cast<float>(c_.beta2),
                       .eps = static_cast<float>(c_.eps),
                       .weight_decay = static_cast<float>(c_.weight_decay)};
  save_dtype_ = c_.save_dtype ? *c_.save_dtype : model_storage_dtype(start_.dir, start_.policy);
  state_.total_steps = total;
  state_.config = c_.to_json();
  state_.config_hash = fnv_hex(state_.config.dump());
  state_.data_files = data_->fingerprints();
  state_.ranks = comm_.size();
}

// The backend, the execution mode (auto chunks planned for this very step), and every model
// the objective holds: fp32 weights, gradients and AdamW moments, as the ranks and dist.zero
// divide them (step/model_set.h).
void Trainer::build_models() {
  exec_ = c_.exec();
  check_zero3();  // before the auto chunks plan a step of what dist.zero 3 does not run
  if (exec_.offload.any()) pool_.set_host(&host_pool_);
  if (c_.layer_chunk == 0 || c_.head_chunk == 0) {
    const ResolvedChunks rc =
        resolve_auto_chunks(c_, start_.policy, exec_, world_.size(), data_->longest_prompt());
    exec_.layer_chunk = rc.layer_chunk;
    exec_.head_chunk = rc.head_chunk;
    log_.out(
        "auto chunks: layer %lld, head %lld: the planned step peaks at %.1f MiB of the %.1f MiB "
        "budget\n",
        static_cast<long long>(rc.layer_chunk), static_cast<long long>(rc.head_chunk),
        static_cast<double>(rc.planned_peak) / 1048576.0,
        static_cast<double>(rc.budget) / 1048576.0);
  }
  std::optional<ModelConfig> ref_cfg, value_cfg;
  const std::string& ref_dir = c_.reference_dir();
  if (setup_.needs_reference() && !ref_dir.empty()) {
    ref_cfg = extend_context(load_config(ref_dir), c_.context, c_.where("context.rope_scaling"));
    if (ref_cfg->vocab_size != start_.policy.vocab_size)
      throw InputError(ref_dir + ": the reference model's vocab_size differs from the policy's");
  }
  if (setup_.needs_value_model()) value_cfg = value_model_config(c_, start_.policy, start_.ckpt);
  // (LoRA: the adapters are never sharded; only a value model would be.)
  if (c_.precision != Precision::fp32 && c_.dist.zero > 0 && c_.dist.zero < 3 &&
      world_.size() > 1 &&
      (!c_.lora.enabled() || setup_.needs_value_model()))
    throw InputError(
        c_.where("dist.zero") + ": dist.zero " + std::to_string(c_.dist.zero) +
        " with precision bf16 is not supported yet (the sharded optimizer gathers fp32 "
        "weights); use dist.zero 0");
  const ModelSetOptions opts{.param_dtype = storage_dtype(c_.precision),
                             .grad_dtype = c_.grad_dtype,
                             .optim = &optim_,
                             .comm = &world_,  // gradients: summed over every rank
                             .zero = c_.dist.zero,
                             .lora = c_.lora.enabled() ? &c_.lora : nullptr,
                             .offload_optimizer = exec_.offload.optimizer};
  models_ =
      std::make_unique<ModelSet>(setup_, start_.policy, pool_, *be_, opts,
                                 ref_cfg ? &*ref_cfg : nullptr, value_cfg ? &*value_cfg : nullptr);
  const ModelSources from = sources();
  load_policy(*models_, *be_, from, log_);
  start_data();
  load_reference(*models_, from, log_);
  load_value(*models_, *be_, from, log_);
  runner_ = std::make_unique<StepRunner>(setup_, models_->views(), *be_, pool_, exec_, comm_,
                                         StepRunnerOptions{.context = context_});
}

// dist.zero 3 (dist/sharded_weights.h) runs full fine-tuning with SFT on data-parallel
// ranks; what has not been made to work with sharded weights yet is refused by name.
void Trainer::check_zero3() const {
  if (c_.dist.zero != 3 || world_.size() == 1) return;
  auto refuse = [&](const std::string& what) {
    throw InputError(c_.where("dist.zero") + ": dist.zero 3 " + what +
                     " is not supported yet (docs/DISTRIBUTED.md, ZeRO-3); use dist.zero 2");
  };
  if (c_.objective != ObjectiveKind::sft)
    refuse(std::string("with objective ") + objective_traits(c_.objective).name);
  if (c_.lora.enabled()) refuse("with lora");
  if (!c_.data_eval.empty() || c_.data_eval_text != nullptr || c_.eval_fraction > 0.0)
    refuse("with evaluation data (data.eval, data.eval_fraction)");
}

// The models' sources (train/run_models.h).
ModelSources Trainer::sources() const { return ModelSources{c_, start_}; }

// A fresh run's data at epoch 0; a resumed one's at the checkpoint's cursor, with its counters.
void Trainer::start_data() {
  if (start_.ckpt.empty()) {
    data_->start();
    return;
  }
  data_->resume(start_.resumed, start_.ckpt + "/trainer_state.json");
  state_.step = start_.resumed.step;
  state_.tokens_seen = start_.resumed.tokens_seen;
  state_.skipped_steps = start_.resumed.skipped_steps;
  log_.out("resuming from %s: step %lld of %lld, epoch %lld\n", start_.ckpt.c_str(),
           static_cast<long long>(state_.step), static_cast<long long>(state_.total_steps),
           static_cast<long long>(start_.resumed.epoch));
  if (start_.resumed.total_steps != state_.total_steps)
    log_.out(
        "note: the run now has %lld steps (the checkpoint's run had %lld): the LR schedule follows "
        "the new length\n",
        static_cast<long long>(state_.total_steps),
        static_cast<long long>(start_.resumed.total_steps));
}

namespace {
// Every tensor's elements, bound or not (ZeRO-3 binds them only while a pass reads them).
int64_t parameter_count(const ParameterSet& w) {
  int64_t n = 0;
  for (size_t i = 0; i < w.size(); ++i) n += w.shape(i).numel();
  return n;
}
}  // namespace

void Trainer::print_summary() const {
  log_.out(
      "model: %s, %lld layers, d=%lld, vocab %lld, %.2fM parameters; mode %s (layer chunk %lld, "
      "head "
      "chunk %lld); precision %s (gradients %s); %d thread%s; saves %s weights\n",
      model_type_name(start_.policy.model_type),
      static_cast<long long>(start_.policy.num_hidden_layers),
      static_cast<long long>(start_.policy.hidden_size),
      static_cast<long long>(start_.policy.vocab_size),
      static_cast<double>(parameter_count(models_->policy_weights())) / 1e6, mode_name(exec_).c_str(),
      static_cast<long long>(exec_.layer_chunk), static_cast<long long>(exec_.head_chunk),
      enum_name<Precision>(kPrecisionNames, c_.precision), dtype_name(c_.grad_dtype), cpu_threads(),
      cpu_threads() == 1 ? "" : "s", dtype_name(save_dtype_));
  if (context_)
    log_.out(
        "context parallel: groups of %d ranks share each micro-batch's rows, %d group%s "
        "split the batch\n",
        context_->size(), comm_.size(), comm_.size() == 1 ? "" : "s");
  if (world_.size() > 1) {
    // LoRA: the adapters are replicated (their gradients all-reduced once per step), so the
    // policy runs as zero 0 whatever dist.zero says; it still divides a value model's state.
    const bool lora = models_->has_lora();
    log_.out("data parallel: %d ranks, zero %d, %lld micro-batch%s per rank per step%s\n",
             world_.size(), lora ? 0 : models_->policy().zero(),
             static_cast<long long>(c_.grad_accum), c_.grad_accum == 1 ? "" : "es",
             lora ? " (LoRA adapters replicated, gradients all-reduced once per step)" : "");
    if (lora && c_.dist.zero > 0)
      log_.out(
          "note: dist.zero %d does not divide LoRA adapters (they are small and replicated on "
          "every rank: zero 0)%s\n",
          c_.dist.zero, models_->has_value() ? "; it divides the value model's state" : "");
  }
  log_.out(
      "training: %lld steps of %lld micro-batch%s (<= %lld tokens each), lr %.3g %s, warmup %lld "
      "-> %s\n",
      static_cast<long long>(state_.total_steps), static_cast<long long>(per_step_),
      per_step_ == 1 ? "" : "es", static_cast<long long>(c_.max_tokens), c_.lr,
      enum_name<ScheduleKind>(kScheduleNames, c_.schedule),
      static_cast<long long>(schedule_.warmup_steps), c_.output_dir.c_str());
  std::fflush(stdout);
}

StepBatches Trainer::next_step_batches() {
  return data_->next(per_step_, *runner_, setup_.needs_value_model(), state_.step);
}

StepResult Trainer::gradients(const StepBatches& step) { return runner_->run(step); }

}  // namespace sbp
