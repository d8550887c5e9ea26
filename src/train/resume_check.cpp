#include "train/resume_check.h"

#include <filesystem>

#include "core/error.h"
#include "model/lora_io.h"
#include "train/online_rollouts.h"

namespace sbp {

namespace {

// A LoRA checkpoint's adapters were trained at its scale (alpha / r, or alpha / sqrt(r) with
// rsLoRA) on its projections: continuing them under another alpha silently changes the model
// they are part of (the saved B was fitted to the old scale), and another r or other targets do
// not fit the saved tensors at all. The checkpoint's adapter_config.json is the record.
void check_resume_adapters(const TrainConfig& c, const std::string& ckpt) {
  const std::string file = ckpt + "/adapter_config.json";
  const bool saved_lora = std::filesystem::exists(file);
  if (!c.lora.enabled()) {
    if (saved_lora)
      throw InputError(c.where("lora.r") + ": resuming from " + ckpt +
                       ": lora.r is 0 (full fine-tuning) but the checkpoint holds LoRA adapters (" +
                       file + "); resume with the checkpoint's lora.* settings");
    return;
  }
  if (!saved_lora)
    throw InputError(c.where("lora.r") + ": resuming from " + ckpt + ": lora.r is " +
                     std::to_string(c.lora.r) + " but the checkpoint holds no LoRA adapters (no " +
                     file + ")");
  const LoraConfig saved = read_lora_config(ckpt);  // errors name the file
  auto differs = [&](const char* key, const nlohmann::json& now, const nlohmann::json& then) {
    if (now == then) return;
    throw InputError(c.where(key) + ": resuming from " + ckpt + ": " + key + " is " + now.dump() +
                     " but the checkpoint's adapters were trained with " + then.dump() + " (" +
                     file + "); the adapters would continue under another scale or shape");
  };
  differs("lora.r", c.lora.r, saved.r);
  differs("lora.alpha", c.lora.alpha, saved.alpha);
  differs("lora.use_rslora", c.lora.use_rslora, saved.use_rslora);
  bool same_targets = true;
  for (int p = 0; p < kLoraTargets; ++p)
    same_targets = same_targets && c.lora.targets(static_cast<LoraTarget>(p)) ==
                                       saved.targets(static_cast<LoraTarget>(p));
  if (!same_targets) differs("lora.target_modules", c.lora.target_modules, saved.target_modules);
}

}  // namespace

std::string check_resume_compatible(const TrainConfig& c, const TrainerState& s,
                                    const nlohmann::json& fingerprints, const std::string& ckpt,
                                    int ranks) {
  check_resume_adapters(c, ckpt);
  std::string note;
  const nlohmann::json now = c.to_json();
  for (const std::string& key : resume_identity_keys()) {
    const nlohmann::json before = s.config.contains(key) ? s.config[key] : nlohmann::json();
    if (key == "grad_accum" && s.ranks != ranks && before.is_number_integer()) {
      // Online GRPO/PPO: a step is the batch of prompts_per_step prompts on any number of ranks
      // (online_rollouts.h), so another rank count changes nothing to say.
      if (trains_online(c)) continue;
      const int64_t then = before.get<int64_t>() * s.ranks, per_step = c.grad_accum * ranks;
      if (then != per_step)
        note = "a step now takes " + std::to_string(per_step) + " micro-batches (" +
               std::to_string(ranks) + " ranks x grad_accum " + std::to_string(c.grad_accum) +
               "), the checkpoint's run took " + std::to_string(then) + " (" +
               std::to_string(s.ranks) + " ranks x " + before.dump() +
               "): the data order is the same, grouped into steps differently";
      continue;
    }
    if (before != now[key]) {
      throw InputError(c.where(key) + ": resuming from " + ckpt + ": " + key + " is " +
                       now[key].dump() + " but the checkpoint was trained with " + before.dump() +
                       " (the data order would differ; start a new run instead)");
    }
  }
  for (const char* which : {"train", "eval"}) {
    const bool had = s.data_files.contains(which), has = fingerprints.contains(which);
    if (had && has && s.data_files[which]["fnv1a64"] != fingerprints[which]["fnv1a64"]) {
      throw InputError(fingerprints[which]["path"].get<std::string>() + ": resuming from " + ckpt +
                       ": the file changed since the checkpoint was written (" +
                       s.data_files[which]["bytes"].dump() + " bytes then, " +
                       fingerprints[which]["bytes"].dump() + " now)");
    }
  }
  return note;
}

}  // namespace sbp
