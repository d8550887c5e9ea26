#pragma once
// ModelConfig: the shape of a Llama / Mistral / Qwen2 / Qwen3 / Gemma 3 decoder, read from a
// Hugging Face config.json (or a built-in preset with the public config values).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"

namespace sbp {

// The decoder families (config.json's model_type) and rope scalings this engine implements.
// gemma3_text: Gemma3ForCausalLM (the text-only Gemma 3 checkpoints, e.g. gemma-3-1b).
// mistral: MistralForCausalLM, Llama's layers with every layer windowed by sliding_window.
enum class ModelType { llama, qwen2, qwen3, gemma3_text, mistral };
inline constexpr EnumName<ModelType> kModelTypeNames[] = {{ModelType::llama, "llama"},
                                                          {ModelType::qwen2, "qwen2"},
                                                          {ModelType::qwen3, "qwen3"},
                                                          {ModelType::gemma3_text, "gemma3_text"},
                                                          {ModelType::mistral, "mistral"}};
const char* model_type_name(ModelType t);
// transformers' class-name prefix: "Llama", "Qwen2", "Qwen3", "Gemma3", "Mistral"
// (LlamaForCausalLM, ...).
const char* model_class_prefix(ModelType t);

// linear: every inverse frequency divided by `factor` (Gemma 3's full-attention layers).
// yarn: YaRN (Qwen2.5 / Qwen3 long-context configs): frequencies ramped between interpolated
//   (divided by factor) and kept by beta_fast/beta_slow rotations over
//   original_max_position_embeddings, and cos/sin scaled by an attention factor.
// dynamic: NTK-aware dynamic scaling: beyond max_position_embeddings the rope base grows with
//   the length served (model/rope.h defines that length for a packed batch and generation).
enum class RopeScalingType { none, llama3, linear, yarn, dynamic };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // yarn only. Unset fields take transformers' defaults (model/rope.cpp) and are not written
  // back, so a config round-trips as it was given.
  std::optional<double> beta_fast;         // default 32 (as is 0: transformers reads `or 32`)
  std::optional<double> beta_slow;         // default 1 (likewise for 0)
  std::optional<double> attention_factor;  // default from factor, mscale, mscale_all_dim
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  std::optional<bool> truncate;  // default true: floor/ceil the correction range
};

// The rope of one table: the inverse frequencies and the factor cos and sin are multiplied by
// (yarn's attention factor, 1 otherwise). The one place the kernels' rope comes from.
struct RopeFrequencies {
  std::vector<float> inv_freq;     // (h/2)
  float attention_factor = 1.0f;   // multiplies cos and sin, as transformers' attention_scaling
  bool operator==(const RopeFrequencies&) const = default;
};

// Upper bounds of a model's dimensions (docs/MODELS.md, "Limits"). config.json is untrusted
// input: without bounds its sizes multiply past int64 (undefined behaviour, then a wrapped size
// that a kernel or the allocator trusts). Each bound is 16x-200x the largest published model's
// value, and together they keep every size the engine forms from them (a weight's bytes, one
// layer's (T, d) activations at T < 2^31) far inside int64.
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;        // largest published: 18432
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;  // 53248 (Llama 3.1 405B)
inline constexpr int64_t kMaxLayers = 4096;                        // 126 (Llama 3.1 405B)
inline constexpr int64_t kMaxHeads = 4096;                         // 128; also key/value heads
inline constexpr int64_t kMaxHeadDim = 4096;                       // 256 (Gemma)
// num_attention_heads * head_dim and num_key_value_heads * head_dim: q_proj is (H*h, d).
inline constexpr int64_t kMaxAttentionWidth = int64_t{1} << 20;
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;  // 262144 (Gemma 3)
// Positions are int32 in the kernels: 2^31 positions are 0 .. 2^31 - 1.
inline constexpr int64_t kMaxPositionEmbeddings = int64_t{1} << 31;
// All parameters together (~140x the largest published models, 1 PiB in fp32): every
// parameter-sized buffer set (weights, gradients, two moments, master weights, a reference
// model) stays below 2^53 bytes.
inline constexpr int64_t kMaxParameters = int64_t{1} << 48;

struct ModelConfig {
  ModelType model_type = ModelType::qwen3;
  int64_t hidden_size = 0;          // d
  int64_t intermediate_size = 0;    // F
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // H
  int64_t num_key_value_heads = 0;  // G
  int64_t head_dim = 0;             // h
  int64_t vocab_size = 0;           // V
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  // llama/qwen3: bias on q,k,v,o; qwen2 always has q,k,v bias; mistral never has one.
  bool attention_bias = false;
  std::string torch_dtype = "float32";  // dtype of the checkpoint on disk
  // config.json's pad_token_id, which transformers passes to every family's embedding as
  // nn.Embedding's padding_idx: lookups of that row add no gradient to it (a tied LM head's
  // part still does) and initialisation zeroes it. nullopt: null, or absent outside Gemma 3
  // (Gemma3TextConfig's default is 0). Kept as written; padding_row() resolves it.
  std::optional<int64_t> pad_token_id;

  // The sliding windows: Gemma 3 (per layer type), Mistral (every layer), Qwen2 / Qwen3 with
  // use_sliding_window (from max_window_layers on); other configs keep these defaults.
  int64_t sliding_window = 0;       // window w of the sliding layers (0: no sliding layers)
  std::vector<bool> layer_sliding;  // per layer: "sliding_attention" (true) or "full_attention"

  // Gemma 3 (gemma3_text) only; the other families keep these defaults.
  double query_pre_attn_scalar = 0.0;  // attention scale = query_pre_attn_scalar^-1/2 (0: 1/sqrt(h))
  double rope_local_base_freq = 10000.0;  // rope theta of the sliding layers (no scaling there)
  double final_logit_softcapping = 0.0;   // logits = c tanh(logits / c); 0 = none

  nlohmann::json extra;  // fields we do not interpret, written back unchanged

  // Derived architecture switches.
  bool gemma() const { return model_type == ModelType::gemma3_text; }
  bool qkv_bias() const { return model_type == ModelType::qwen2 || attention_bias; }
  bool o_bias() const { return model_type != ModelType::qwen2 && attention_bias; }
  bool qk_norm() const { return model_type == ModelType::qwen3 || gemma(); }
  // Gemma: norm weights are stored centred on 0 and scale by (1 + w).
  float norm_weight_offset() const { return gemma() ? 1.0f : 0.0f; }
  // Gemma's "sandwich" norms: the attention and MLP outputs are normed before the residual add.
  bool sandwich_norms() const { return gemma(); }
  // Gemma's MLP: gelu_tanh(gate) * up instead of silu(gate) * up.
  bool gelu_mlp() const { return gemma(); }
  // The embedding row of pad_token_id, or -1 for none. Negative ids count from the end of the
  // vocabulary, as torch's padding_idx does (old LLaMA configs have pad_token_id: -1).
  int64_t padding_row() const;
  // Softmax scale of the attention scores.
  float attention_scale() const;
  // Embedding output multiplier: Gemma's sqrt(hidden_size) (as float32), 1 otherwise.
  float embed_scale() const;
  // The same as the engine applies it: transformers casts it to the weights' dtype, so a bf16
  // run multiplies by bf16(sqrt(d)) (sqrt(3072) = 55.43 becomes 55.5).
  float embed_scale(bool bf16_activations) const;
  bool layer_is_sliding(int64_t l) const;
  // The attention window of layer l (AttentionDims::window): sliding_window or 0.
  int64_t layer_window(int64_t l) const { return layer_is_sliding(l) ? sliding_window : 0; }
  bool has_sliding_layers() const;
  // Sets num_hidden_layers (a --layers override) and, for Gemma, the layer types to the first
  // L of the model's repeating pattern (every p-th layer full, p = 1 + the first full layer's
  // index; all sliding if there is none): gemma3-1b cut to 4 layers is its first 4 layers.
  void set_num_layers(int64_t L);

  // Parses and validates; `source` names the file in error messages.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  static ModelConfig from_file(const std::string& path);
  nlohmann::json to_json() const;

  // Throws InputError naming `source` and the field if a value is out of its range (the limits
  // above, finite positive norm epsilon and rope theta) or the shapes are inconsistent. Every
  // config is validated before anything is sized from it.
  void validate(const std::string& source) const;

  // Rotary inverse frequencies (h/2), after rope scaling, as Hugging Face computes them at
  // initialisation (dynamic: for max_position_embeddings positions, i.e. unscaled).
  // local: those of Gemma's sliding layers (rope_local_base_freq, never scaled).
  std::vector<float> rope_inv_freq(bool local = false) const;
  // The rope of a table that serves positions 0 .. seq_len - 1 (model/rope.cpp). seq_len only
  // matters to `dynamic` scaling (transformers' max(position_ids) + 1).
  RopeFrequencies rope_frequencies(int64_t seq_len, bool local = false) const;
  // The rope scaling in words ("yarn x4 over 32768 original positions"); "" for none.
  std::string rope_scaling_description() const;
  // The positions the model was trained on: yarn's original_max_position_embeddings (yarn
  // stretches a rope trained on those; Qwen's long-context configs add it at inference), else
  // max_position_embeddings (Llama 3.1 was trained to its 131072 with its llama3 scaling).
  int64_t trained_positions() const;

  // Checked: throws InputError if the count does not fit int64 (validate bounds it first).
  int64_t num_parameters() const;
};

// Built-in presets with public config values: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b,
// qwen3-14b, qwen3-32b, qwen2.5-0.5b, qwen2.5-7b, qwen2.5-72b, llama3.1-8b, llama3.1-70b,
// llama3.2-1b, gemma3-1b, gemma3-4b,
// gemma3-12b, gemma3-27b (text models), mistral-7b-v0.1, mistral-7b-v0.3 and tiny test shapes.
bool has_preset(const std::string& name);
ModelConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

// Resolves a --model argument: a directory with config.json, a config.json file, or a preset.
ModelConfig resolve_config(const std::string& model_arg);

}  // namespace sbp
