#include "model/parameters.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/rng.h"

namespace sbp {

std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, F = c.intermediate_size, h = c.head_dim;
  // Checked: specs are also built for configs made in code, which validate() has not seen.
  const int64_t Hh = checked_mul(c.num_attention_heads, h, "num_attention_heads * head_dim");
  const int64_t Gh = checked_mul(c.num_key_value_heads, h, "num_key_value_heads * head_dim");
  std::vector<ParamSpec> s;
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, d}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    s.push_back({p + "input_layernorm.weight", {d}});
    s.push_back({p + "self_attn.q_proj.weight", {Hh, d}});
    if (c.qkv_bias()) s.push_back({p + "self_attn.q_proj.bias", {Hh}});
    s.push_back({p + "self_attn.k_proj.weight", {Gh, d}});
    if (c.qkv_bias()) s.push_back({p + "self_attn.k_proj.bias", {Gh}});
    s.push_back({p + "self_attn.v_proj.weight", {Gh, d}});
    if (c.qkv_bias()) s.push_back({p + "self_attn.v_proj.bias", {Gh}});
    s.push_back({p + "self_attn.o_proj.weight", {d, Hh}});
    if (c.o_bias()) s.push_back({p + "self_attn.o_proj.bias", {d}});
    if (c.qk_norm()) {
      s.push_back({p + "self_attn.q_norm.weight", {h}});
      s.push_back({p + "self_attn.k_norm.weight", {h}});
    }
    s.push_back({p + "post_attention_layernorm.weight", {d}});
    if (c.sandwich_norms()) {
      s.push_back({p + "pre_feedforward_layernorm.weight", {d}});
      s.push_back({p + "post_feedforward_layernorm.weight", {d}});
    }
    s.push_back({p + "mlp.gate_proj.weight", {F, d}});
    s.push_back({p + "mlp.up_proj.weight", {F, d}});
    s.push_back({p + "mlp.down_proj.weight", {d, F}});
  }
  s.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

std::vector<ParamSpec> parameter_specs(const ModelConfig& c, ModelHead head) {
  std::vector<ParamSpec> s = parameter_specs(c);
  if (head == ModelHead::value) {
    if (!c.tie_word_embeddings) s.pop_back();  // lm_head.weight
    s.push_back({"score.weight", {1, c.hidden_size}});
  }
  return s;
}

ParameterSet::ParameterSet(const ModelConfig& cfg, Pool& pool, Category category, DType dtype,
                           bool zero)
    : ParameterSet(cfg, pool, category, dtype, zero, ModelHead::lm) {}

ParameterSet::ParameterSet(const ModelConfig& cfg, Pool& pool, Category category, DType dtype,
                           bool zero, ModelHead head)
    : head_(head),
      tied_(cfg.tie_word_embeddings),
      layers_(cfg.num_hidden_layers),
      sandwich_(cfg.sandwich_norms()),
      norm_offset_(cfg.norm_weight_offset()),
      padding_row_(cfg.padding_row()) {
  specs_ = parameter_specs(cfg, head);
  buffers_.reserve(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    buffers_.push_back(zero ? pool.zeros(category, dtype, specs_[i].shape)
                            : pool.allocate(category, dtype, specs_[i].shape));
    index_[specs_[i].name] = i;
  }
  build_views();
}

ParameterSet ParameterSet::unallocated(const ModelConfig& cfg, ModelHead head) {
  ParameterSet p;
  p.head_ = head;
  p.tied_ = cfg.tie_word_embeddings;
  p.layers_ = cfg.num_hidden_layers;
  p.sandwich_ = cfg.sandwich_norms();
  p.norm_offset_ = cfg.norm_weight_offset();
  p.padding_row_ = cfg.padding_row();
  p.specs_ = parameter_specs(cfg, head);
  p.buffers_.resize(p.specs_.size());
  for (size_t i = 0; i < p.specs_.size(); ++i) p.index_[p.specs_[i].name] = i;
  p.build_views();
  return p;
}

void ParameterSet::attach(size_t i, Buffer b) {
  SBP_CHECK(
      b.view().shape == specs_[i].shape,
      "attach " + specs_[i].name + ": " + b.view().describe() + " for " + specs_[i].shape.str());
  buffers_[i] = std::move(b);
  build_views();
}

void ParameterSet::detach(size_t i) {
  buffers_[i].reset();
  build_views();
}

const Tensor& ParameterSet::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw InputError("no parameter named '" + name + "'");
  return buffers_[it->second].view();
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n = checked_add(n, b.view().numel(), "a parameter set's size");
  return n;
}

void ParameterSet::build_views() {
  auto opt = [&](const std::string& n) -> Tensor {
    auto it = index_.find(n);
    return it == index_.end() ? Tensor() : buffers_[it->second].view();
  };
  views_.embed = get("model.embed_tokens.weight");
  views_.final_norm = get("model.norm.weight");
  if (head_ == ModelHead::value) {
    views_.score = get("score.weight");
  } else {
    views_.lm_head = tied_ ? views_.embed : get("lm_head.weight");
  }
  views_.layers.resize(
      static_cast<size_t>(layers_));  // in place: views held by an engine stay valid
  for (int64_t l = 0; l < layers_; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerTensors& t = views_.layers[static_cast<size_t>(l)];
    t.input_norm = get(p + "input_layernorm.weight");
    t.q_proj = get(p + "self_attn.q_proj.weight");
    t.q_bias = opt(p + "self_attn.q_proj.bias");
    t.k_proj = get(p + "self_attn.k_proj.weight");
    t.k_bias = opt(p + "self_attn.k_proj.bias");
    t.v_proj = get(p + "self_attn.v_proj.weight");
    t.v_bias = opt(p + "self_attn.v_proj.bias");
    t.o_proj = get(p + "self_attn.o_proj.weight");
    t.o_bias = opt(p + "self_attn.o_proj.bias");
    t.q_norm = opt(p + "self_attn.q_norm.weight");
    t.k_norm = opt(p + "self_attn.k_norm.weight");
    if (sandwich_) {  // Gemma: post_attention_layernorm norms the attention output
      t.attn_out_norm = get(p + "post_attention_layernorm.weight");
      t.post_norm = get(p + "pre_feedforward_layernorm.weight");
      t.mlp_out_norm = get(p + "post_feedforward_layernorm.weight");
    } else {
      t.post_norm = get(p + "post_attention_layernorm.weight");
    }
    t.gate_proj = get(p + "mlp.gate_proj.weight");
    t.up_proj = get(p + "mlp.up_proj.weight");
    t.down_proj = get(p + "mlp.down_proj.weight");
  }
}

void init_parameters(ParameterSet& params, uint64_t seed, InitStyle style, float std) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    if (!t.data) continue;
    const std::string& n = params.name(i);
    // One independent stream per tensor, so adding a tensor does not shift the others.
    Rng rng(seed, n);
    const bool is_norm = n.find("norm") != std::string::npos;
    const bool is_bias = n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
    // transformers zeroes nn.Embedding's padding_idx row after drawing the others.
    const int64_t zero_row =
        style == InitStyle::hf && n == "model.embed_tokens.weight" ? params.padding_row() : -1;
    // Drawn on the host in row blocks of bounded size, then uploaded.
    std::vector<float> p;
    for_row_blocks(t, int64_t{1} << 20, [&](int64_t r0, int64_t r1) {
      const Tensor rows = t.slice_rows(r0, r1);
      p.resize(static_cast<size_t>(rows.numel()));
      for (float& x : p) {
        if (is_norm) {
          const float identity = 1.0f - params.norm_weight_offset();  // (offset + w) = 1
          x = style == InitStyle::test ? identity + 0.2f * rng.normal() : identity;
        } else if (is_bias) {
          x = style == InitStyle::test ? 0.1f * rng.normal() : 0.0f;
        } else {
          x = std * rng.normal();
        }
      }
      if (zero_row >= r0 && zero_row < r1) {  // drawn and then zeroed: the other rows keep theirs
        const int64_t d = rows.cols();
        std::fill_n(p.begin() + (zero_row - r0) * d, d, 0.0f);
      }
      upload_f32(rows, p);
    });
  }
}

}  // namespace sbp
