#pragma once
// Training checkpoints: <output_dir>/checkpoint-<step>/ holds
//   config.json + model*.safetensors   a Hugging Face model directory (weights in the export dtype)
//   tokenizer files                    copied from the tokenizer directory, so the checkpoint
//                                      loads in transformers and inference engines as it is
//   optimizer.safetensors              AdamW moments, fp32: "m.<name>", "v.<name>"; metadata
//                                      {"step": N} (the optimizer's step count); a ZeRO-1/2 run
//                                      writes optimizer-rank<r>-of-<R>.safetensors instead, one
//                                      per rank (optim/optimizer_files.h)
//   master_weights.safetensors         fp32 weights, only when the export dtype is not fp32:
//                                      resuming must continue from the exact fp32 values
//   value_model/                       PPO only: the value model as a Hugging Face directory
//                                      (config.json with architectures
//                                      ["<Family>ForSequenceClassification"], num_labels 1;
//                                      model.safetensors: model.* + score.weight, export dtype),
//                                      its optimizer.safetensors and, when the export dtype is
//                                      not fp32, its master_weights.safetensors
//   trainer_state.json                 step, data cursor, RNG state, config (trainer.h)
//
// A checkpoint is written into a hidden staging directory next to it, fsynced and renamed into
// place, trainer_state.json last: a directory named checkpoint-<step> is always complete.
// With several ranks rank 0 writes everything but the optimizer shards, which each rank writes
// into the same staging directory (a file system all ranks share) before rank 0 renames it.
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/output_paths.h"
#include "data/data_source.h"
#include "dist/communicator.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/parameters.h"
#include "optim/adamw.h"

namespace sbp {

struct TrainerState {
  int64_t step = 0;                     // optimizer steps done
  int64_t total_steps = 0;              // of the whole run (the LR schedule's length)
  int64_t epoch = 0;                    // the epoch the data cursor is in (0-based)
  int64_t micro_batches_done = 0;       // of that epoch's packing plan
  std::array<uint64_t, 4> epoch_rng{};  // data-order RNG state at the start of `epoch`
  int64_t tokens_seen = 0;
  int64_t skipped_steps = 0;  // steps of `step` skipped for a non-finite loss or gradient norm
                              // (on_nonfinite: skip): the optimizer made step - skipped updates
  int64_t ranks = 1;          // processes of the run that wrote it (data parallel)
  nlohmann::json config;      // TrainConfig::to_json() of the run that wrote it
  std::string config_hash;    // FNV-1a of config.dump(), for a quick look
  nlohmann::json data_files;  // {"train": {"path", "bytes", "fnv1a64"}, "eval": ...}
  // Online GRPO/PPO: the batch of rollouts still being trained on (num_iterations > 1), null
  // otherwise (train/online_rollouts.h). Its micro_batches_done counts prompts.
  nlohmann::json rollouts;

  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& j, const std::string& where);
};

// Writes this rank's part of one model's optimizer state into a checkpoint directory (e.g.
// DataParallel::save_optimizer; one process: all of it).
using OptimizerWriter = std::function<void(const std::string& dir)>;

// PPO's value model: its own weights and optimizer, saved next to the policy's.
struct ValueModelContents {
  const ModelConfig& cfg;
  const ParameterSet& weights;  // fp32 master weights, ModelHead::value
  OptimizerWriter optimizer;
};

struct CheckpointContents {
  const ModelConfig& cfg;
  const ParameterSet& weights;  // fp32 master weights
  DType export_dtype;           // dtype of the Hugging Face weights (the value model's too)
  OptimizerWriter optimizer;
  const TrainerState& state;
  std::string tokenizer_dir;  // tokenizer files are copied from here
  std::string model_dir;      // generation_config.json is copied from here ("" = none)
  const ValueModelContents* value_model = nullptr;  // PPO: written to value_model/
  // LoRA: the checkpoint holds the adapters as PEFT saves them (adapter_config.json +
  // adapter_model.safetensors, base_model_name_or_path = lora_base) instead of the weights.
  const LoraSet* lora = nullptr;
  std::string lora_base;
};

// The subdirectory of a checkpoint that holds PPO's value model.
inline constexpr const char* kValueModelDir = "value_model";

// Writes <output_dir>/checkpoint-<state.step> (replacing one of that step); returns its path.
// A collective over `comm`: every rank calls it (each writes its optimizer part); when any rank
// fails, every rank throws and nothing is renamed into place.
std::string save_checkpoint(const std::string& output_dir, const CheckpointContents& c,
                            Communicator& comm = single_process());

// Deletes the oldest checkpoint-<step> directories beyond the newest `keep_last` (0: keep all).
void rotate_checkpoints(const std::string& output_dir, int64_t keep_last);

// Removes what a killed run left behind in output_dir: staging directories, checkpoints being
// deleted by a rotation, and checkpoint-<step> directories without trainer_state.json (a save
// renames a complete staging directory into place, so only an interrupted deletion leaves one).
void remove_stale_staging(const std::string& output_dir);

// What a run would overwrite in output_dir, before anything is written: for a fresh run
// (resumed_from empty) every checkpoint there and a non-empty metrics file; for a resumed one
// the checkpoints newer than the one it resumes from (an abandoned continuation) and, in an
// output_dir other than the checkpoint's own, every checkpoint and the metrics file. Without
// `overwrite` any of these is an InputError naming them and the way out; with it, the
// checkpoints are deleted (the metrics file is restarted or cut back as usual) unless one of
// `inputs` (the run's model, tokenizer, data, adapter, references: key and path) is or lies
// inside what would be deleted or restarted: that is an InputError naming
// overwrite_output_dir, the key and the input (core/output_paths.h's rule), and nothing is
// deleted. A run must never delete what it reads, nor a later --resume find a new run's
// checkpoint where its DPO reference was.
void claim_output_dir(const std::string& output_dir, const std::string& metrics,
                      const std::string& resumed_from, bool overwrite, bool lead,
                      const std::vector<NamedPath>& inputs = {});

// `dir` is a checkpoint (it has trainer_state.json) or an output directory, whose newest
// complete checkpoint is returned. Throws InputError when there is none.
std::string resolve_resume_dir(const std::string& dir);

TrainerState read_trainer_state(const std::string& checkpoint_dir);

// The fp32 weights of a checkpoint (master_weights.safetensors, else the model files); its
// optimizer state is read by DataParallel::load_optimizer (optim/optimizer_files.h, any layout).
// Throws InputError naming the file and tensor on any mismatch.
void load_checkpoint_weights(const std::string& checkpoint_dir, const ModelConfig& cfg,
                             ParameterSet& weights);

// The value model's weights alone; its optimizer state is in checkpoint_dir/value_model.
void load_value_checkpoint_weights(const std::string& checkpoint_dir, const ModelConfig& cfg,
                                   ParameterSet& weights);

// config.json of a value model saved in `dtype`: cfg's, as transformers'
// <Family>ForSequenceClassification with num_labels = 1 (TRL's value-model layout).
nlohmann::json value_model_config_json(const ModelConfig& cfg, DType dtype);

// The dtype the input model's weights are stored in: its safetensors' dtype, else config.json's
// torch_dtype ("" model_dir: a randomly initialised model), else F32.
DType model_storage_dtype(const std::string& model_dir, const ModelConfig& cfg);

// FNV-1a 64 of a data set's bytes (a file's, or its lines in memory), as 16 hex digits, and its
// size: cheap proof the data is unchanged when a run resumes.
nlohmann::json data_fingerprint(const DataSource& source);

}  // namespace sbp
