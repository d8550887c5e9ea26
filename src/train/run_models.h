#pragma once
// The files of a training run's models (step/model_set.h): what each model is loaded from, and
// the checkpoint they are saved to.
//   fresh run   the policy from the starting model (or drawn from the seed); with LoRA the base
//               from it and the adapters drawn as PEFT draws them (or from lora_adapter); the
//               reference from <objective>.reference or the starting model; PPO's value model
//               from ppo.value_model / the starting model / the seed
//   resumed     the checkpoint's fp32 weights (or adapters) and optimizer states; the reference
//               as on a fresh run, never the resumed weights
#include <string>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "step/model_set.h"
#include "train/checkpoint.h"
#include "train/run_log.h"
#include "train/train_config.h"

namespace sbp {

// Where a run starts from.
struct RunStart {
  ModelConfig policy;    // the starting model's config
  std::string dir;       // the starting model's directory ("" when randomly initialised)
  std::string ckpt;      // the checkpoint resumed from ("" for a fresh run)
  TrainerState resumed;  // its trainer_state.json (a fresh run: empty)
};

// Where a run's models come from: the config and the start.
struct ModelSources {
  const TrainConfig& c;
  const RunStart& start;
};

// The policy's weights (or the frozen base and its adapters) and, resuming, its optimizer state.
void load_policy(ModelSet& models, Backend& be, const ModelSources& from, const RunLog& log);
// The reference model (DPO, PPO, GRPO with a KL term), if the set holds a copy of its own.
void load_reference(ModelSet& models, const ModelSources& from, const RunLog& log);
// PPO's value model and, resuming, its optimizer state.
void load_value(ModelSet& models, Backend& be, const ModelSources& from, const RunLog& log);

// Writes <output_dir>/checkpoint-<state.step> of the run's models (the adapters alone with LoRA)
// and rotates the old ones (keep_last, rank 0); returns its path. Every rank calls it.
std::string save_models(ModelSet& models, const ModelSources& from, DType save_dtype,
                        const TrainerState& state, Communicator& comm, bool lead);

}  // namespace sbp
