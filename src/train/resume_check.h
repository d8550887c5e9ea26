#pragma once
// A resumed run must see the same data in the same order as the run that wrote the checkpoint:
// the same identity keys (train_config.h resume_identity_keys) and the same files.
#include <string>

#include <nlohmann/json.hpp>

#include "train/checkpoint.h"
#include "train/train_config.h"

namespace sbp {

// Throws InputError naming the key (or the file) that differs; a LoRA run's lora.r, lora.alpha,
// lora.use_rslora and lora.target_modules must be those of the checkpoint's
// adapter_config.json (another alpha would rescale the trained adapters). On another number of ranks the
// data order is the same but a step groups ranks x grad_accum micro-batches of it: the same
// product continues exactly; another one is returned as a note for the log ("" when none).
// Online GRPO/PPO steps do not depend on the rank count: no note.
std::string check_resume_compatible(const TrainConfig& c, const TrainerState& s,
                                    const nlohmann::json& fingerprints, const std::string& ckpt,
                                    int ranks);

}  // namespace sbp
