#include "train/trainer.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include "backend/cpu_threads.h"
#include "core/error.h"
#include "dist/world.h"
#include "model/checkpoint_io.h"
#include "model/lora_io.h"
#include "train/auto_chunks.h"
#include "train/demo.h"
#include "train/rank_settings.h"
#include "train/resume_check.h"
#include "core/stop_signal.h"
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

void Trainer::Log::out(const char* fmt, ...) const {
  if (!lead) return;
  va_list a;
  va_start(a, fmt);
  std::vprintf(fmt, a);
  va_end(a);
}

void Trainer::Log::err(const char* fmt, ...) const {
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
  Trainer trainer(c, resume, gpu ? *gpu : comm, std::move(be));
  return trainer.run();
}

Trainer::Trainer(const TrainConfig& c, const std::string& resume, Communicator& comm)
    : Trainer(c, resume, comm, make_backend(c.backend)) {}

Trainer::Trainer(const TrainConfig& c, const std::string& resume, Communicator& comm,
                 std::unique_ptr<Backend> backend)
    : c_(c),
      comm_(comm),
      log_{comm.rank() == 0},
      t_start_(Clock::now()),
      setup_(c.objective_setup()),
      be_(std::move(backend)) {
  load_inputs(resume);
  plan_schedule();
  build_models();
  // Every input is valid: now what the run would overwrite (nothing is written before this).
  // The run's inputs: overwrite_output_dir must not delete any of them.
  std::vector<NamedPath> inputs;
  for (const TrainConfig::Input& in : c_.inputs()) inputs.push_back({in.key, in.path});
  inputs.push_back({"the config", c_.source});
  claim_output_dir(c_.output_dir, c_.metrics, ckpt_, c_.overwrite_output_dir, log_.lead, inputs);
  print_summary();
}

// The starting model, the checkpoint's state when resuming, and the data.
void Trainer::load_inputs(const std::string& resume) {
  std::tie(cfg_, start_dir_) = resolve_starting_model(c_);
  if (!resume.empty()) {
    ckpt_ = resolve_resume_dir(resume);
    resumed_ = read_trainer_state(ckpt_);
  }
  if (setup_.needs_value_model() && ckpt_.empty()) check_ppo_value_model(c_, cfg_);
  if (trains_online(c_)) {
    load_prompts();
    return;
  }
  if (!c_.rewards.empty())
    throw InputError(c_.where("rewards") +
                     ": rewards score sampled completions: they need objective grpo or ppo with "
                     "prompt records ({\"prompt\": ...} without completions) in data.train");
  data_ = prepare_training_data(c_, cfg_.vocab_size);
  log_.out("data: %s\n", data_.train_summary.c_str());
  if (data_.chat)
    log_.out("chat template: %s (from %s)\n", data_.chat->name().c_str(),
             data_.chat_source.c_str());
  if (!ckpt_.empty()) {
    const std::string note =
        check_resume_compatible(c_, resumed_, data_.fingerprints, ckpt_, comm_.size());
    if (!note.empty()) log_.out("note: %s\n", note.c_str());
  }
  eval_ = pack_in_order(data_.eval, c_.max_tokens, c_.objective);
  if (setup_.traits().rollouts && !eval_.empty()) {
    log_.out("note: %s has no held-out loss (offline rollouts): %s is not evaluated\n",
             objective_name(c_.objective), data_.eval_source.c_str());
    eval_.clear();
  }
  if (!eval_.empty())
    log_.out("eval: %s, %zu micro-batch%s\n", data_.eval_source.c_str(), eval_.size(),
             eval_.size() == 1 ? "" : "es");
}

// Online GRPO/PPO: data.train's prompt records, encoded as `streambp generate` encodes them,
// and the reward functions (command rewards start here).
void Trainer::load_prompts() {
  if (comm_.size() > 1)
    throw InputError(c_.where("data.train") + ": online " + objective_name(c_.objective) +
                     " (prompt records) runs on one process for now; run it without mpirun");
  if (!c_.data_eval.empty() || c_.eval_fraction > 0.0)
    log_.out("note: online %s has no held-out loss: data.eval / eval_fraction are not used\n",
             objective_name(c_.objective));
  std::optional<ChatTemplate> chat;
  if (c_.chat_template) {
    chat = chat_template_for(*c_.chat_template);
    chat->date_string = c_.date_string;
  }
  prompt_encoder_.emplace(PromptEncoder::from_dir(c_.tokenizer, chat, c_.add_bos));
  std::vector<PromptRecord> prompts =
      read_prompt_records(c_.data_train, &*prompt_encoder_, cfg_.vocab_size);
  const size_t n = prompts.size();
  // Every prompt and its completion must fit the model's positions; checked here, with the
  // config, so the error names the key before anything is written (generation would find it
  // at the first prompt too long, after the output directory exists, naming max_new_tokens).
  const RolloutSettings& rs = c_.rollout();
  const std::string key = std::string(objective_name(c_.objective)) + ".max_completion_length";
  for (const PromptRecord& p : prompts) {
    const int64_t P = static_cast<int64_t>(p.ids.size());
    if (P + rs.max_completion_length > cfg_.max_position_embeddings)
      throw InputError(c_.where(key) + ": " + key + " " + std::to_string(rs.max_completion_length) +
                       " + the " + std::to_string(P) + " tokens of the prompt at " + p.where +
                       " exceed the model's max_position_embeddings (" +
                       std::to_string(cfg_.max_position_embeddings) + ")");
  }
  online_ = std::make_unique<OnlineRollouts>(c_, std::move(prompts), *prompt_encoder_,
                                             cfg_.vocab_size);
  data_.fingerprints = {{"train", file_fingerprint(c_.data_train)}};
  const RolloutSettings& r = c_.rollout();
  log_.out("data: %zu prompts from %s (online %s: %lld prompts x %lld completions per batch, "
           "up to %lld new tokens each, %lld step%s per batch)\n",
           n, c_.data_train.c_str(), objective_name(c_.objective),
           static_cast<long long>(r.prompts_per_step), static_cast<long long>(r.num_generations),
           static_cast<long long>(r.max_completion_length),
           static_cast<long long>(r.num_iterations), r.num_iterations == 1 ? "" : "s");
  if (!ckpt_.empty()) {
    const std::string note =
        check_resume_compatible(c_, resumed_, data_.fingerprints, ckpt_, comm_.size());
    if (!note.empty()) log_.out("note: %s\n", note.c_str());
  }
}

// The run's length (max_steps, or the steps of `epochs` epochs) and its LR schedule. Every rank
// builds the same plan; a step takes ranks x grad_accum micro-batches of it.
void Trainer::plan_schedule() {
  per_step_ = c_.grad_accum * comm_.size();
  int64_t total = c_.max_steps;
  if (online_) {
    if (total == 0) total = online_->steps_in_epochs(c_.epochs);
  } else {
    batches_ = std::make_unique<TrainBatches>(data_.train.examples, c_.max_tokens, c_.shuffle,
                                              c_.seed, c_.objective);
    if (total == 0) total = batches_->steps_in_epochs(c_.epochs, per_step_, c_.where("epochs"));
  }
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
  save_dtype_ = c_.save_dtype ? *c_.save_dtype : model_storage_dtype(start_dir_, cfg_);
  state_.total_steps = total;
  state_.config = c_.to_json();
  state_.config_hash = fnv_hex(state_.config.dump());
  state_.data_files = data_.fingerprints;
  state_.ranks = comm_.size();
}

// The backend, the execution mode (auto chunks planned for this very step), and every model
// the objective holds: fp32 weights, gradients and AdamW moments, as the ranks and dist.zero
// divide them (step/model_set.h).
void Trainer::build_models() {
  exec_ = c_.exec();
  if (exec_.offload.any()) pool_.set_host(&host_pool_);
  if (c_.layer_chunk == 0 || c_.head_chunk == 0) {
    const ResolvedChunks rc = resolve_auto_chunks(c_, cfg_, exec_, comm_.size(),
                                                  online_ ? online_->longest_prompt() : 0);
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
    ref_cfg = load_config(ref_dir);
    if (ref_cfg->vocab_size != cfg_.vocab_size)
      throw InputError(ref_dir + ": the reference model's vocab_size differs from the policy's");
  }
  if (setup_.needs_value_model()) value_cfg = value_model_config(c_, cfg_, ckpt_);
  if (c_.precision != Precision::fp32 && c_.dist.zero > 0 && comm_.size() > 1)
    throw InputError(
        c_.where("dist.zero") + ": dist.zero " + std::to_string(c_.dist.zero) +
        " with precision bf16 is not supported yet (the sharded optimizer gathers fp32 "
        "weights); use dist.zero 0");
  const ModelSetOptions opts{.param_dtype = storage_dtype(c_.precision),
                             .grad_dtype = c_.grad_dtype,
                             .optim = &optim_,
                             .comm = &comm_,
                             .zero = c_.dist.zero,
                             .lora = c_.lora.enabled() ? &c_.lora : nullptr};
  models_ =
      std::make_unique<ModelSet>(setup_, cfg_, pool_, *be_, opts, ref_cfg ? &*ref_cfg : nullptr,
                                 value_cfg ? &*value_cfg : nullptr);
  load_policy();
  load_reference();
  load_value();
  runner_ = std::make_unique<StepRunner>(setup_, models_->views(), *be_, pool_, exec_, comm_);
}

// Where a trained model's fp32 values are loaded or drawn: its fp32 master weights when the
// weights are bf16 (then rounded into them by round_into_weights), else the weights.
static ParameterSet& fp32_values(ParameterSet& weights, DataParallel& dp) {
  return dp.master() ? *dp.master() : weights;
}
static void round_into_weights(Backend& be, const ParameterSet& weights, DataParallel& dp) {
  if (!dp.master()) return;
  for (size_t i = 0; i < weights.size(); ++i) be.copy(weights.tensor(i), dp.master()->tensor(i));
}

// The optimizer files count the updates they have made: step - skipped_steps of trainer_state.json
// (every step updates once, unless on_nonfinite skipped it). Files from two different
// checkpoints disagree here.
void Trainer::check_optimizer_steps(int64_t optimizer_steps, const std::string& dir) const {
  const int64_t want = resumed_.step - resumed_.skipped_steps;
  if (optimizer_steps == want) return;
  throw InputError(dir + ": the optimizer state has made " + std::to_string(optimizer_steps) +
                   " updates, but " + ckpt_ + "/trainer_state.json says " + std::to_string(want) +
                   " (step " + std::to_string(resumed_.step) + " minus " +
                   std::to_string(resumed_.skipped_steps) +
                   " skipped): the files are not from one checkpoint");
}

// A fresh run: the starting model's weights (or a draw from the seed) and the data at epoch 0.
// A resumed one: the checkpoint's fp32 weights, optimizer state and data cursor.
void Trainer::load_policy() {
  if (models_->has_lora()) {
    load_lora_policy();
    return;
  }
  ParameterSet& w = fp32_values(models_->policy_weights(), models_->policy());
  load_policy_values(w);
  round_into_weights(*be_, models_->policy_weights(), models_->policy());
}

void Trainer::load_policy_values(ParameterSet& w) {
  if (ckpt_.empty()) {
    if (start_dir_.empty()) {
      init_parameters(w, c_.seed, InitStyle::hf);
      log_.out("model: %s, random weights (seed %llu)\n", c_.model.c_str(),
               static_cast<unsigned long long>(c_.seed));
    } else {
      load_weights(start_dir_, cfg_, w);
      log_.out("model: %s\n", start_dir_.c_str());
    }
    if (online_)
      online_->start();
    else
      batches_->start();
    return;
  }
  load_checkpoint_weights(ckpt_, cfg_, w);
  models_->policy().load_optimizer(ckpt_);
  check_optimizer_steps(models_->policy().optimizer_steps(), ckpt_);
  resume_state();
}

// The base weights are the starting model's on a fresh and on a resumed run alike (a LoRA
// checkpoint holds only the adapters); the adapters start as PEFT starts them (A Kaiming-uniform,
// B = 0: the adapted model is the base model) and continue from the checkpoint.
void Trainer::load_lora_policy() {
  ParameterSet& w = models_->policy_weights();
  if (start_dir_.empty())
    init_parameters(w, c_.seed, InitStyle::hf);
  else
    load_weights(start_dir_, cfg_, w);
  LoraSet& ad = models_->lora_weights();
  log_.out("model: %s (frozen), LoRA %s: %.3fM adapter parameters\n",
           start_dir_.empty() ? (c_.model + ", random weights").c_str() : start_dir_.c_str(),
           c_.lora.describe().c_str(), static_cast<double>(ad.numel()) / 1e6);
  if (ckpt_.empty()) {
    if (c_.lora_adapter.empty()) {
      init_lora(ad, c_.seed);
    } else {
      load_lora_weights(c_.lora_adapter, ad);
      log_.out("adapters: from %s\n", c_.lora_adapter.c_str());
    }
    if (online_)
      online_->start();
    else
      batches_->start();
    return;
  }
  load_lora_weights(ckpt_, ad);
  models_->lora_optimizer()->load(ckpt_);
  check_optimizer_steps(models_->lora_optimizer()->steps(), ckpt_);
  resume_state();
}

void Trainer::resume_state() {
  const DataCursor cursor{resumed_.epoch, resumed_.micro_batches_done, resumed_.epoch_rng};
  if (online_)
    online_->resume(cursor, resumed_.rollouts, ckpt_ + "/trainer_state.json");
  else
    batches_->resume(cursor, ckpt_ + "/trainer_state.json");
  state_.step = resumed_.step;
  state_.tokens_seen = resumed_.tokens_seen;
  state_.skipped_steps = resumed_.skipped_steps;
  log_.out("resuming from %s: step %lld of %lld, epoch %lld\n", ckpt_.c_str(),
           static_cast<long long>(state_.step), static_cast<long long>(state_.total_steps),
           static_cast<long long>(resumed_.epoch));
  if (resumed_.total_steps != state_.total_steps)
    log_.out(
        "note: the run now has %lld steps (the checkpoint's run had %lld): the LR schedule follows "
        "the new length\n",
        static_cast<long long>(state_.total_steps), static_cast<long long>(resumed_.total_steps));
}

// DPO, PPO (and GRPO with a KL term) score against a reference model: dpo/ppo/grpo.reference,
// else the starting model — reloaded (or re-drawn from the seed), never the resumed weights.
void Trainer::load_reference() {
  if (models_->has_lora() && !models_->has_reference() && setup_.needs_reference())
    log_.out("reference model: the base model with the adapters off (no second copy)\n");
  if (!models_->has_reference()) return;
  const std::string& ref_dir = c_.reference_dir();
  const std::string dir = ref_dir.empty() ? start_dir_ : ref_dir;
  if (dir.empty()) {
    init_parameters(models_->reference_weights(), c_.seed, InitStyle::hf);
  } else {
    load_weights(dir, models_->reference_config(), models_->reference_weights());
  }
  log_.out("reference model: %s\n", !ref_dir.empty() ? ref_dir.c_str() : "the starting model");
}

// PPO's value model: from ppo.value_model / the starting model / the seed on a fresh run, from
// checkpoint-N/value_model/ (weights and optimizer) on a resumed one.
void Trainer::load_value() {
  if (!models_->has_value()) return;
  ParameterSet& w = fp32_values(models_->value_weights(), models_->value());
  if (ckpt_.empty()) {
    const std::string from = init_value_weights(c_, start_dir_, models_->value_config(), w);
    log_.out("value model: %s\n", from.c_str());
  } else {
    load_value_checkpoint_weights(ckpt_, models_->value_config(), w);
    models_->value().load_optimizer(ckpt_ + "/" + kValueModelDir);
    check_optimizer_steps(models_->value().optimizer_steps(), ckpt_ + "/" + kValueModelDir);
    log_.out("value model: %s/%s\n", ckpt_.c_str(), kValueModelDir);
  }
  round_into_weights(*be_, models_->value_weights(), models_->value());
}

void Trainer::print_summary() const {
  log_.out(
      "model: %s, %lld layers, d=%lld, vocab %lld, %.2fM parameters; mode %s (layer chunk %lld, "
      "head "
      "chunk %lld); precision %s (gradients %s); %d thread%s; saves %s weights\n",
      model_type_name(cfg_.model_type), static_cast<long long>(cfg_.num_hidden_layers),
      static_cast<long long>(cfg_.hidden_size), static_cast<long long>(cfg_.vocab_size),
      static_cast<double>(models_->policy_weights().numel()) / 1e6, mode_name(exec_).c_str(),
      static_cast<long long>(exec_.layer_chunk), static_cast<long long>(exec_.head_chunk),
      enum_name<Precision>(kPrecisionNames, c_.precision), dtype_name(c_.grad_dtype), cpu_threads(),
      cpu_threads() == 1 ? "" : "s", dtype_name(save_dtype_));
  if (comm_.size() > 1)
    log_.out("data parallel: %d ranks, zero %d, %lld micro-batch%s per rank per step\n",
             comm_.size(), models_->policy().zero(), static_cast<long long>(c_.grad_accum),
             c_.grad_accum == 1 ? "" : "es");
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
  if (!online_) return batches_->next(per_step_, comm_);
  // The rollouts are sampled from the weights the step starts from, with the adapters on.
  Engine policy = runner_->policy_engine();
  if (!setup_.needs_value_model()) return online_->next(policy, nullptr, state_.step);
  Engine value = runner_->value_engine();
  return online_->next(policy, &value, state_.step);
}

const DataCursor& Trainer::data_cursor() const {
  return online_ ? online_->cursor() : batches_->cursor();
}

double Trainer::epoch_progress() const {
  return online_ ? online_->epoch_progress() : batches_->epoch_progress();
}

StepResult Trainer::gradients(const StepBatches& step) { return runner_->run(step); }

}  // namespace sbp
