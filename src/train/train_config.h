#pragma once
// The training run's configuration: a YAML file plus `key=value` overrides from the command line
// (dotted keys: optim.lr=1e-4). Every key is listed in docs/TRAINING.md; an unknown key, a value
// of the wrong type or out of range is an InputError naming the file and line (or the override).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "core/dtype.h"
#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/records.h"
#include "engine/exec_config.h"
#include "model/lora.h"
#include "objective/objective_setup.h"
#include "optim/lr_schedule.h"
#include "reward/reward.h"
#include "train/context_extension.h"
#include "train/demo.h"

namespace sbp {

// Online GRPO/PPO (data.train holds prompt records): what each generation phase samples
// (train/online_rollouts.h). The same keys sit under each online objective's section (grpo:,
// ppo:).
struct RolloutSettings {
  int64_t num_generations = 8;         // completions per prompt (a GRPO group)
  int64_t prompts_per_step = 4;        // prompts sampled for one batch of rollouts
  int64_t max_completion_length = 256;  // new tokens per completion
  int64_t num_iterations = 1;          // optimizer steps on each batch of rollouts
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;   // 0: no limit
  double min_p = 0.0;
  // Stop strings: a completion ends once its text contains one (and keeps it), besides eos and
  // the chat template's end of turn.
  std::vector<std::string> stop;
  // DAPO's overlong filtering (TRL's mask_truncated_completions): a completion cut off by
  // max_completion_length trains on none of its tokens; its reward still counts in its group's
  // advantages.
  bool mask_truncated_completions = false;
};

// The defaults of what the objectives' setting rows (objective/objective_settings.h) name beyond
// ObjectiveSetup: every model directory key ("dpo.reference", "ppo.value_model"), empty, and the
// rollout settings of every online objective (rollouts in its traits row). A group objective
// (GRPO) samples TRL's 8 completions per prompt by default, one that scores each completion
// alone (PPO) one.
std::map<std::string, std::string> objective_model_dirs();
std::map<ObjectiveKind, RolloutSettings> objective_rollouts();

// Data parallelism across processes (`mpirun -np N streambp train`, docs/DISTRIBUTED.md).
struct DistSettings {
  int zero = 0;  // 0: replicated optimizer; 1: AdamW moments sharded; 2: gradients sharded too
  // Context parallelism (docs/DISTRIBUTED.md "Context parallelism"): groups of this many
  // consecutive ranks share each micro-batch's rows; the groups split the batch as data
  // parallelism does. Must divide the number of ranks.
  int context_parallel = 1;
};

enum class NonFinitePolicy { stop, skip };
inline constexpr EnumName<NonFinitePolicy> kNonFiniteNames[] = {{NonFinitePolicy::stop, "stop"},
                                                                {NonFinitePolicy::skip, "skip"}};

// Every closed set is parsed into its type when the config is loaded: nothing downstream
// compares strings. `auto` settings are empty optionals.
struct TrainConfig {
  std::string source;  // the YAML file ("" when built in code)

  // What to train.
  std::string model;      // Hugging Face directory; or a config.json / preset (random init)
  std::string tokenizer;  // directory with tokenizer.json (+ tokenizer_config.json); "" = the
                          // model directory (the directory of a model config.json)
  std::string output_dir;
  std::string metrics;                // "" = <output_dir>/metrics.jsonl
  // Dashboards the metrics lines also go to (tensorboard, wandb), written by the Python package
  // (python/streambp/_report.py); the program refuses a non-empty list (cli/cmd_train.cpp).
  std::vector<std::string> report_to;
  bool overwrite_output_dir = false;  // a fresh run may replace a previous run's checkpoints
  std::optional<DType> save_dtype;    // f32 | bf16 | f16; empty (auto): the input checkpoint's
  // context.rope_scaling, context.max_position_embeddings (train/context_extension.h).
  ContextExtension context;

  // Data.
  std::string data_train, data_eval;      // a JSONL path, or in_memory_label() with the text:
  std::shared_ptr<const std::string> data_train_text, data_eval_text;  // lines given in memory
                                          // (the Python package); null: read the file
  double eval_fraction = 0.0;             // held out of data.train when data.eval is not given
  std::optional<DataFormat> data_format;  // empty (auto): detected from the first record
  std::optional<ChatTemplateName> chat_template;  // empty (auto): from tokenizer_config.json
  std::string date_string = "26 Jul 2024";        // llama3's "Today Date"
  Truncation truncation = Truncation::error;
  int64_t max_seq_len = 0;  // tokens per sequence (0: = max_tokens)
  bool shuffle = true;
  bool append_eos = true;       // plain text: end with the eos token (trained)
  std::optional<bool> add_bos;  // plain text; empty (auto): tokenizer_config.json's add_bos_token

  // Objective: which one runs, and the settings of every objective. Each objective's keys
  // (dpo.beta, kto.desirable_weight, ...) are the setting rows its own file declares
  // (objective/objective_settings.h), bound to objective_settings (whose kind is not read:
  // objective_setup() sets `objective` there) or to model_dirs; the rollout keys of an online
  // objective (grpo.num_generations, ...) to its entry in rollouts.
  ObjectiveKind objective = ObjectiveKind::sft;
  ObjectiveSetup objective_settings;
  std::map<std::string, std::string> model_dirs = objective_model_dirs();  // "": starting model
  std::map<ObjectiveKind, RolloutSettings> rollouts = objective_rollouts();

  // Online GRPO/PPO: the reward functions that score sampled completions (docs/REWARDS.md),
  // the default answer time of command rewards, and how often sampled completions are logged
  // to <output_dir>/completions.jsonl (0: never).
  std::vector<RewardSpec> rewards;
  double reward_timeout = 60.0;
  int64_t log_completions_every = 0;
  // Not a key: set by a program that embeds the trainer (the Python package's
  // train(callbacks=...), python/src/), called with each metrics.jsonl line on rank 0.
  std::function<void(const nlohmann::ordered_json&)> on_metrics;

  // Execution.
  BackendSpec backend;  // cpu
  // fp32, or bf16: weights, activations, checkpoints and head blocks in bf16 with fp32
  // accumulation, fp32 master weights and AdamW moments (DESIGN §5 "Precision").
  Precision precision = Precision::fp32;
  DType grad_dtype = DType::F32;  // f32 (default: fp32 gradient accumulation) or bf16
  ExecConfig mode;  // base | checkpoint | stream | <store|recompute|stream>+<full|chunked>;
                    // its chunk sizes are layer_chunk / head_chunk below
  int64_t layer_chunk = ExecConfig{}.layer_chunk;  // 0: auto, the largest that fits memory_budget
  int64_t head_chunk = ExecConfig{}.head_chunk;    // 0: auto
  std::string
      memory_budget;  // "16GiB", ...: what `auto` chunks may use; "" = 90% of physical memory
  std::string offload = "none";  // "checkpoints": layer inputs wait in host memory (Offload)
  std::string host_memory_budget;  // with offload: the host bytes `auto` chunks may plan with
  int64_t max_tokens = 4096;  // tokens per micro-batch (packed)
  int64_t grad_accum = 1;     // micro-batches per optimizer step
  int64_t epochs = 1;
  int64_t max_steps = 0;         // > 0: stop after this many optimizer steps (epochs repeat)
  int64_t stop_after_steps = 0;  // > 0: end this invocation after this many steps, with a
                                 // checkpoint (time-limited jobs); the schedule is unchanged
  int threads = 0;               // 0: all cores
  uint64_t seed = 42;
  DistSettings dist;  // only matters with more than one rank
  // LoRA (the `lora:` section; r = 0: full fine-tuning): adapters on a frozen base, saved as a
  // PEFT adapter; the reference model of DPO/GRPO/PPO is the base with the adapters off.
  LoraConfig lora{.r = 0};
  // A PEFT adapter directory to start the adapters from (lora.adapter): its r, lora_alpha,
  // target_modules and use_rslora become the run's (lora.* keys given too must agree).
  std::string lora_adapter;

  // Optimizer and schedule.
  double lr = 1e-5;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // 0: no clipping
  ScheduleKind schedule = ScheduleKind::linear;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;  // used when warmup_steps is 0
  double min_lr_ratio = 0.0;

  // Loop.
  int64_t eval_every = 0;  // steps; 0: only at the end (when there is eval data)
  int64_t save_every = 0;  // steps; 0: only at the end
  int64_t keep_last = 3;   // checkpoints kept in output_dir; 0: all
  // A step whose loss or gradient norm is not finite: stop the run with an error (nothing is
  // updated or saved), or skip it (no update; counted in trainer_state.json and the metrics).
  NonFinitePolicy on_nonfinite = NonFinitePolicy::stop;

  // The built-in demo (a `demo:` section instead of model/data).
  bool demo = false;
  DemoOptions demo_options;

  // Where each key was set ("file.yaml:12", "override 'optim.lr=1e-4'"), for messages.
  std::map<std::string, std::string> origin;
  std::string where(const std::string& key) const;

  // Every key and its value, under its dotted name (what trainer_state.json stores).
  nlohmann::json to_json() const;

  // The objective as the step runner takes it.
  ObjectiveSetup objective_setup() const;
  // The execution mode with this run's chunk sizes (0 where auto is still to be resolved).
  ExecConfig exec() const;
  // The running objective's model directory of a type (SettingType::reference_dir,
  // value_model_dir): its key ("dpo.reference"; "" when the objective has none) and the
  // directory set there ("" = the starting model).
  struct ModelDir {
    std::string key;
    const std::string& dir;
  };
  ModelDir model_dir(SettingType type) const;
  const std::string& reference_dir() const { return model_dir(SettingType::reference_dir).dir; }
  // The rollout settings of the objective (its <name>.num_generations, ...); an offline
  // objective's are the defaults, unused.
  const RolloutSettings& rollout() const;

  // Every input the config names, in one list: compared by content across ranks
  // (rank_settings.h), never overwritten by the run (trainer). data: a data file, digested
  // whole; otherwise a model directory (or a preset name), digested by its headers.
  struct Input {
    const char* key;  // "model", "dpo.reference", ...
    const std::string& path;
    bool data;
    const std::string* text = nullptr;  // data given in memory (path is its label)
  };
  std::vector<Input> inputs() const;

  // data.train / data.eval as the readers take them: the file, or the lines held in memory.
  DataSource train_source() const { return {data_train, data_train_text}; }
  DataSource eval_source() const { return {data_eval, data_eval_text}; }
};

// Reads `yaml_path` (may be "" for overrides only), applies the overrides in order, fills the
// defaults that depend on other keys (output_dir, metrics, max_seq_len) and validates.
TrainConfig load_train_config(const std::string& yaml_path,
                              const std::vector<std::string>& overrides);

// Applies overrides and validates (used when resuming from a checkpoint's stored config).
TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& where,
                                   const std::vector<std::string>& overrides);

// The keys a resumed run must share with the checkpoint for the data order to be the same.
std::vector<std::string> resume_identity_keys();

}  // namespace sbp
