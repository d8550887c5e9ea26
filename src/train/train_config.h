#pragma once
// The training run's configuration: a YAML file plus `key=value` overrides from the command line
// (dotted keys: optim.lr=1e-4). Every key is listed in docs/TRAINING.md; an unknown key, a value
// of the wrong type or out of range is an InputError naming the file and line (or the override).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/demo.h"

namespace sbp {

struct DpoSettings {
  double beta = 0.1;
  std::string loss_type = "sigmoid";  // sigmoid | ipo | hinge
  double label_smoothing = 0.0;
  std::string reference;  // reference model directory ("" = the starting model)
};

struct GrpoSettings {
  double beta = 0.0;          // KL coefficient (0: no reference model)
  double epsilon = 0.2;       // clip range, low side
  double epsilon_high = 0.0;  // clip range, high side (0: = epsilon)
  std::string loss_type = "dapo";       // grpo | bnpo | dr_grpo | dapo
  std::string scale_rewards = "group";  // group | batch | none
  std::string reference;
};

struct PpoSettings {
  double beta = 0.05;          // KL penalty coefficient in the per-token reward
  double epsilon = 0.2;        // policy clip range
  double value_epsilon = 0.2;  // value clip range
  double vf_coef = 0.1;
  double gamma = 1.0;
  double lam = 0.95;
  std::string kl_estimator = "k1";  // k1 (TRL's default) | k3, of the per-token KL penalty
  std::string reference;
  std::string value_model;  // Hugging Face directory with score.weight ("" = the starting
                            // model's trunk with a head drawn from the seed)
};

// Data parallelism across processes (`mpirun -np N streambp train`, docs/DISTRIBUTED.md).
struct DistSettings {
  int zero = 0;  // 0: replicated optimizer; 1: AdamW moments sharded; 2: gradients sharded too
};

struct TrainConfig {
  std::string source;  // the YAML file ("" when built in code)

  // What to train.
  std::string model;      // Hugging Face directory; or a config.json / preset (random init)
  std::string tokenizer;  // directory with tokenizer.json (+ tokenizer_config.json); "" = the
                          // model directory (the directory of a model config.json)
  std::string output_dir;
  std::string metrics;    // "" = <output_dir>/metrics.jsonl
  std::string save_dtype = "auto";  // auto (the input checkpoint's) | f32 | bf16 | f16

  // Data.
  std::string data_train, data_eval;
  double eval_fraction = 0.0;          // held out of data.train when data.eval is not given
  std::string data_format = "auto";    // auto | messages | prompt_completion | text | preference | rollout
  std::string chat_template = "auto";  // auto (from tokenizer_config.json) | chatml | qwen2.5 | qwen3 | llama3 | llama3.0
  std::string date_string = "26 Jul 2024";  // llama3's "Today Date"
  std::string truncation = "error";    // error | truncate | skip
  int64_t max_seq_len = 0;             // tokens per sequence (0: = max_tokens)
  bool shuffle = true;
  bool append_eos = true;              // plain text: end with the eos token (trained)
  std::string add_bos = "auto";        // plain text: auto | true | false

  // Objective.
  std::string objective = "sft";  // sft | dpo | grpo | ppo
  DpoSettings dpo;
  GrpoSettings grpo;
  PpoSettings ppo;

  // Execution.
  std::string mode = "stream";  // base | checkpoint | stream | <store|recompute|stream>+<full|chunked>
  int64_t layer_chunk = 1024;   // 0: auto, the largest that fits memory_budget
  int64_t head_chunk = 512;     // 0: auto
  std::string memory_budget;    // "16GiB", ...: what `auto` chunks may use; "" = 90% of physical memory
  int64_t max_tokens = 4096;  // tokens per micro-batch (packed)
  int64_t grad_accum = 1;     // micro-batches per optimizer step
  int64_t epochs = 1;
  int64_t max_steps = 0;      // > 0: stop after this many optimizer steps (epochs repeat)
  int64_t stop_after_steps = 0;  // > 0: end this invocation after this many steps, with a
                                 // checkpoint (time-limited jobs); the schedule is unchanged
  int threads = 0;            // 0: all cores
  uint64_t seed = 42;
  DistSettings dist;          // only matters with more than one rank

  // Optimizer and schedule.
  double lr = 1e-5;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;  // 0: no clipping
  std::string schedule = "linear";  // constant | linear | cosine
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;  // used when warmup_steps is 0
  double min_lr_ratio = 0.0;

  // Loop.
  int64_t eval_every = 0;  // steps; 0: only at the end (when there is eval data)
  int64_t save_every = 0;  // steps; 0: only at the end
  int64_t keep_last = 3;   // checkpoints kept in output_dir; 0: all

  // The built-in demo (a `demo:` section instead of model/data).
  bool demo = false;
  DemoOptions demo_options;

  // Where each key was set ("file.yaml:12", "override 'optim.lr=1e-4'"), for messages.
  std::map<std::string, std::string> origin;
  std::string where(const std::string& key) const;

  // Every key and its value, under its dotted name (what trainer_state.json stores).
  nlohmann::json to_json() const;
};

// Reads `yaml_path` (may be "" for overrides only), applies the overrides in order, fills the
// defaults that depend on other keys (output_dir, metrics, max_seq_len) and validates.
TrainConfig load_train_config(const std::string& yaml_path, const std::vector<std::string>& overrides);

// Applies overrides and validates (used when resuming from a checkpoint's stored config).
TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& where,
                                   const std::vector<std::string>& overrides);

// The keys a resumed run must share with the checkpoint for the data order to be the same.
std::vector<std::string> resume_identity_keys();

}  // namespace sbp
