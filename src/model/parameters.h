#pragma once
// The parameter set of a decoder, owned by Buffers from a Pool: each tensor identified by its
// ParamId (parameter_id.h) and named as Hugging Face names it. The same layout serves weights,
// gradients and optimizer moments (one set each).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/pool.h"
#include "model/config.h"
#include "model/parameter_id.h"

namespace sbp {

// Views of one decoder layer's tensors (undefined Tensors where the architecture has none).
struct LayerTensors {
  Tensor input_norm;  // (d)
  Tensor q_proj;      // (H*h, d)
  Tensor q_bias;      // (H*h)        qwen2 / attention_bias
  Tensor k_proj;      // (G*h, d)
  Tensor k_bias;      // (G*h)
  Tensor v_proj;      // (G*h, d)
  Tensor v_bias;      // (G*h)
  Tensor o_proj;      // (d, H*h)
  Tensor o_bias;      // (d)          attention_bias (llama/qwen3)
  Tensor q_norm;      // (h)          qwen3
  Tensor k_norm;      // (h)          qwen3
  Tensor post_norm;   // (d)          the norm before the MLP: post_attention_layernorm
                      //              (Llama/Qwen), pre_feedforward_layernorm (Gemma)
  Tensor attn_out_norm;  // (d)       Gemma: post_attention_layernorm, on the attention output
  Tensor mlp_out_norm;   // (d)       Gemma: post_feedforward_layernorm, on the MLP output
  Tensor gate_proj;   // (F, d)
  Tensor up_proj;     // (F, d)
  Tensor down_proj;   // (d, F)
};

struct ModelTensors {
  Tensor embed;       // (V, d)
  Tensor final_norm;  // (d)
  Tensor lm_head;     // (V, d); the same memory as `embed` when tied; undefined in value models
  Tensor score;       // (1, d) value head "score.weight"; value models only
  std::vector<LayerTensors> layers;
};

// What sits on top of the trunk (embeddings, layers, final norm).
//   lm:    the causal LM head, "lm_head.weight" (V, d), or the embedding when tied.
//   value: a value model as TRL builds it (AutoModelForSequenceClassification with
//          num_labels = 1): "score.weight" (1, d), no bias, applied to the final-normed hidden
//          state of every row; no LM head (and so nothing tied).
enum class ModelHead { lm, value };

struct ParamSpec {
  ParamId id;        // what the tensor is: ask this, never the name
  std::string name;  // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
};

// How this config's Hugging Face names spell its norms (parameter_id.h).
NormLayout norm_layout(const ModelConfig& cfg);

// Every tensor a checkpoint of this config holds, in a fixed order (lm_head absent if tied).
std::vector<ParamSpec> parameter_specs(const ModelConfig& cfg);
// The same for either head: `lm` gives exactly parameter_specs(cfg); `value` replaces the LM
// head by "score.weight" (1, d) at the end.
std::vector<ParamSpec> parameter_specs(const ModelConfig& cfg, ModelHead head);

class ParameterSet {
 public:
  ParameterSet() = default;
  // Allocates one buffer per spec, uninitialised (zeros if `zero`).
  ParameterSet(const ModelConfig& cfg, Pool& pool, Category category, DType dtype, bool zero);
  // The same with an explicit head (ModelHead::value: a value model's parameters).
  ParameterSet(const ModelConfig& cfg, Pool& pool, Category category, DType dtype, bool zero,
               ModelHead head);
  // Specs only, no memory: every tensor is undefined until attach()ed. For gradients that exist
  // only while a backward writes them (ZeRO-2, src/dist/).
  static ParameterSet unallocated(const ModelConfig& cfg, ModelHead head);
  ParameterSet(ParameterSet&&) = default;
  ParameterSet& operator=(ParameterSet&&) = default;

  size_t size() const { return buffers_.size(); }
  const std::string& name(size_t i) const { return specs_[i].name; }
  const ParamId& id(size_t i) const { return specs_[i].id; }
  const Tensor& tensor(size_t i) const { return buffers_[i].view(); }
  // The index of a tensor by identity, or by Hugging Face name (parsed by parameter_id.h).
  std::optional<size_t> find(const ParamId& id) const;
  std::optional<size_t> find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name).has_value(); }
  const Tensor& get(const std::string& name) const;  // throws naming the tensor
  const ModelTensors& views() const { return views_; }
  int64_t numel() const;
  ModelHead head() const { return head_; }
  const Shape& shape(size_t i) const { return specs_[i].shape; }  // also when not attached
  // What the model adds to every norm weight (ModelConfig::norm_weight_offset): 1 for Gemma,
  // whose norms are stored centred on 0, so their identity initialisation is 0.
  float norm_weight_offset() const { return norm_offset_; }
  // ModelConfig::padding_row(): the embedding row whose lookups get no gradient (-1: none).
  int64_t padding_row() const { return padding_row_; }

  // Binds tensor i to `b` (of the spec's shape) or releases it; views() follow at once, so an
  // engine holding views().layers[l] sees the new memory.
  void attach(size_t i, Buffer b);
  void detach(size_t i);
  bool attached(size_t i) const { return buffers_[i].defined(); }

 private:
  void build_views();
  std::vector<ParamSpec> specs_;
  std::vector<Buffer> buffers_;
  std::map<ParamId, size_t> index_;
  ModelTensors views_;
  ModelHead head_ = ModelHead::lm;
  bool tied_ = false;   // cfg.tie_word_embeddings
  int64_t layers_ = 0;  // cfg.num_hidden_layers
  NormLayout layout_ = NormLayout::plain;  // norm_layout(cfg)
  float norm_offset_ = 0.0f;  // cfg.norm_weight_offset()
  int64_t padding_row_ = -1;  // cfg.padding_row()
};

// Initialisation from a seed. `hf` follows transformers' _init_weights (normal(0, std) for
// matrices and embeddings, ones for norms (zeros for Gemma's 1 + w norms), zeros for biases, a
// zero embedding row at padding_row()). `test` also perturbs norms and biases, and keeps the
// padding row random, so that gradient tests exercise every term.
enum class InitStyle { hf, test };
void init_parameters(ParameterSet& params, uint64_t seed, InitStyle style, float std = 0.02f);

}  // namespace sbp
