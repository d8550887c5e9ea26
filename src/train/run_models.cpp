#include "train/run_models.h"

#include <optional>

#include "core/error.h"
#include "model/checkpoint_io.h"
#include "model/lora_io.h"
#include "optim/lora_adamw.h"
#include "train/value_model_init.h"

namespace sbp {

namespace {

// Where a trained model's fp32 values are loaded or drawn: its fp32 master weights when the
// weights are bf16, or the host's copy of the weights with offload: optimizer (then made the
// weights' by DataParallel::weights_loaded), else the weights.
ParameterSet& fp32_values(ParameterSet& weights, DataParallel& dp) {
  return dp.master() ? *dp.master() : weights;
}



// The optimizer files count the updates they have made: step - skipped_steps of
// trainer_state.json (every step updates once, unless on_nonfinite skipped it). Files from two
// different checkpoints disagree here.
void check_optimizer_steps(int64_t optimizer_steps, const std::string& dir,
                           const ModelSources& from) {
  const TrainerState& r = from.start.resumed;
  const int64_t want = r.step - r.skipped_steps;
  if (optimizer_steps == want) return;
  throw InputError(dir + ": the optimizer state has made " + std::to_string(optimizer_steps) +
                   " updates, but " + from.start.ckpt + "/trainer_state.json says " +
                   std::to_string(want) + " (step " + std::to_string(r.step) + " minus " +
                   std::to_string(r.skipped_steps) +
                   " skipped): the files are not from one checkpoint");
}

void load_full_policy(ModelSet& models, Backend& be, const ModelSources& from, const RunLog& log) {
  const TrainConfig& c = from.c;
  ParameterSet& w = fp32_values(models.policy_weights(), models.policy());
  if (from.start.ckpt.empty()) {
    if (from.start.dir.empty()) {
      init_parameters(w, c.seed, InitStyle::hf);
      log.out("model: %s, random weights (seed %llu)\n", c.model.c_str(),
              static_cast<unsigned long long>(c.seed));
    } else {
      load_weights(from.start.dir, from.start.policy, w);
      log.out("model: %s\n", from.start.dir.c_str());
    }
  } else {
    load_checkpoint_weights(from.start.ckpt, from.start.policy, w);
    models.policy().load_optimizer(from.start.ckpt);
    check_optimizer_steps(models.policy().optimizer_steps(), from.start.ckpt, from);
  }
  models.policy().weights_loaded(models.policy_weights());
}

// The base weights are the starting model's on a fresh and on a resumed run alike (a LoRA
// checkpoint holds only the adapters); the adapters start as PEFT starts them (A
// Kaiming-uniform, B = 0: the adapted model is the base model) and continue from the checkpoint.
void load_lora_policy(ModelSet& models, const ModelSources& from, const RunLog& log) {
  const TrainConfig& c = from.c;
  ParameterSet& w = models.policy_weights();
  if (from.start.dir.empty())
    init_parameters(w, c.seed, InitStyle::hf);
  else
    load_weights(from.start.dir, from.start.policy, w);
  LoraSet& ad = models.lora_weights();
  log.out("model: %s (frozen), LoRA %s: %.3fM adapter parameters\n",
          from.start.dir.empty() ? (c.model + ", random weights").c_str() : from.start.dir.c_str(),
          c.lora.describe().c_str(), static_cast<double>(ad.numel()) / 1e6);
  if (from.start.ckpt.empty()) {
    if (c.lora_adapter.empty()) {
      init_lora(ad, c.seed);
    } else {
      load_lora_weights(c.lora_adapter, ad);
      log.out("adapters: from %s\n", c.lora_adapter.c_str());
    }
    return;
  }
  load_lora_weights(from.start.ckpt, ad);
  models.lora_optimizer()->load(from.start.ckpt);
  check_optimizer_steps(models.lora_optimizer()->steps(), from.start.ckpt, from);
}

}  // namespace

void load_policy(ModelSet& models, Backend& be, const ModelSources& from, const RunLog& log) {
  if (models.has_lora())
    load_lora_policy(models, from, log);
  else
    load_full_policy(models, be, from, log);
}

// DPO, PPO (and GRPO with a KL term) score against a reference model: <objective>.reference,
// else the starting model — reloaded (or re-drawn from the seed), never the resumed weights.
void load_reference(ModelSet& models, const ModelSources& from, const RunLog& log) {
  const TrainConfig& c = from.c;
  if (models.has_lora() && !models.has_reference() && c.objective_setup().needs_reference())
    log.out("reference model: the base model with the adapters off (no second copy)\n");
  if (!models.has_reference()) return;
  const std::string& ref_dir = c.reference_dir();
  const std::string dir = ref_dir.empty() ? from.start.dir : ref_dir;
  if (dir.empty())
    init_parameters(models.reference_weights(), c.seed, InitStyle::hf);
  else
    load_weights(dir, models.reference_config(), models.reference_weights());
  log.out("reference model: %s\n", !ref_dir.empty() ? ref_dir.c_str() : "the starting model");
}

// PPO's value model: from ppo.value_model / the starting model / the seed on a fresh run, from
// checkpoint-N/value_model/ (weights and optimizer) on a resumed one.
void load_value(ModelSet& models, Backend& be, const ModelSources& from, const RunLog& log) {
  if (!models.has_value()) return;
  ParameterSet& w = fp32_values(models.value_weights(), models.value());
  if (from.start.ckpt.empty()) {
    const std::string src = init_value_weights(from.c, from.start.dir, models.value_config(), w);
    log.out("value model: %s\n", src.c_str());
  } else {
    const std::string dir = from.start.ckpt + "/" + kValueModelDir;
    load_value_checkpoint_weights(from.start.ckpt, models.value_config(), w);
    models.value().load_optimizer(dir);
    check_optimizer_steps(models.value().optimizer_steps(), dir, from);
    log.out("value model: %s/%s\n", from.start.ckpt.c_str(), kValueModelDir);
  }
  models.value().weights_loaded(models.value_weights());
}

std::string save_models(ModelSet& models, const ModelSources& from, DType save_dtype,
                        const TrainerState& state, Communicator& comm, bool lead) {
  const TrainConfig& c = from.c;
  // The fp32 values: the master weights of bf16 weights (whose rounding the export writes).
  // ZeRO-3: the whole values gathered from every rank's slices (collective), freed below.
  auto fp32 = [](ParameterSet& w, DataParallel& dp) -> const ParameterSet& {
    if (dp.weight_hook()) return dp.gather_values();
    return dp.master() ? *dp.master() : w;
  };
  std::optional<ValueModelContents> value;
  if (models.has_value())
    value.emplace(
        ValueModelContents{models.value_config(), fp32(models.value_weights(), models.value()),
                           [&](const std::string& dir) { models.value().save_optimizer(dir); }});
  // LoRA: the adapters (PEFT files) and their optimizer; the frozen base is not written.
  const bool lora = models.has_lora();
  const std::string path = save_checkpoint(
      c.output_dir,
      CheckpointContents{
          from.start.policy,
          lora ? models.policy_weights() : fp32(models.policy_weights(), models.policy()),
          save_dtype,
          [&](const std::string& dir) {
            if (lora) {
              // Replicated on every rank: rank 0 writes it, as it writes the adapters.
              if (lead) models.lora_optimizer()->save(dir);
            } else {
              models.policy().save_optimizer(dir);
            }
          },
          state, c.tokenizer, from.start.dir, value ? &*value : nullptr,
          lora ? &models.lora_weights() : nullptr, c.model},
      comm);
  if (!lora && models.policy().weight_hook()) models.policy().release_staging();
  if (lead) rotate_checkpoints(c.output_dir, c.keep_last);
  return path;
}

}  // namespace sbp
