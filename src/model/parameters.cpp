#include "model/parameters.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/rng.h"

namespace sbp {

NormLayout norm_layout(const ModelConfig& c) {
  return c.sandwich_norms() ? NormLayout::sandwich : NormLayout::plain;
}

std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, F = c.intermediate_size, h = c.head_dim;
  // Checked: specs are also built for configs made in code, which validate() has not seen.
  const int64_t Hh = checked_mul(c.num_attention_heads, h, "num_attention_heads * head_dim");
  const int64_t Gh = checked_mul(c.num_key_value_heads, h, "num_key_value_heads * head_dim");
  const NormLayout layout = norm_layout(c);
  std::vector<ParamSpec> s;
  auto add = [&](ParamId id, Shape shape) { s.push_back({id, hf_name(id, layout), shape}); };
  add(model_param(ParamRole::embed), {c.vocab_size, d});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto layer = [&](ParamRole role, Shape shape) { add(layer_param(l, role), shape); };
    layer(ParamRole::input_norm, {d});
    layer(ParamRole::q_proj, {Hh, d});
    if (c.qkv_bias()) layer(ParamRole::q_bias, {Hh});
    layer(ParamRole::k_proj, {Gh, d});
    if (c.qkv_bias()) layer(ParamRole::k_bias, {Gh});
    layer(ParamRole::v_proj, {Gh, d});
    if (c.qkv_bias()) layer(ParamRole::v_bias, {Gh});
    layer(ParamRole::o_proj, {d, Hh});
    if (c.o_bias()) layer(ParamRole::o_bias, {d});
    if (c.qk_norm()) {
      layer(ParamRole::q_norm, {h});
      layer(ParamRole::k_norm, {h});
    }
    // The set's order is the order of files and optimizer states: Hugging Face's
    // post_attention_layernorm comes first in either layout (for Gemma, the attention output's).
    if (c.sandwich_norms()) {
      layer(ParamRole::attn_out_norm, {d});
      layer(ParamRole::post_norm, {d});
      layer(ParamRole::mlp_out_norm, {d});
    } else {
      layer(ParamRole::post_norm, {d});
    }
    layer(ParamRole::gate_proj, {F, d});
    layer(ParamRole::up_proj, {F, d});
    layer(ParamRole::down_proj, {d, F});
  }
  add(model_param(ParamRole::final_norm), {d});
  if (!c.tie_word_embeddings) add(model_param(ParamRole::lm_head), {c.vocab_size, d});
  return s;
}

std::vector<ParamSpec> parameter_specs(const ModelConfig& c, ModelHead head) {
  std::vector<ParamSpec> s = parameter_specs(c);
  if (head == ModelHead::value) {
    if (!c.tie_word_embeddings) s.pop_back();  // lm_head
    const ParamId score = model_param(ParamRole::score);
    s.push_back({score, hf_name(score, norm_layout(c)), {1, c.hidden_size}});
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
      layout_(norm_layout(cfg)),
      norm_offset_(cfg.norm_weight_offset()),
      padding_row_(cfg.padding_row()) {
  specs_ = parameter_specs(cfg, head);
  buffers_.reserve(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    buffers_.push_back(zero ? pool.zeros(category, dtype, specs_[i].shape)
                            : pool.allocate(category, dtype, specs_[i].shape));
    index_[specs_[i].id] = i;
  }
  build_views();
}

ParameterSet ParameterSet::unallocated(const ModelConfig& cfg, ModelHead head) {
  ParameterSet p;
  p.head_ = head;
  p.tied_ = cfg.tie_word_embeddings;
  p.layers_ = cfg.num_hidden_layers;
  p.layout_ = norm_layout(cfg);
  p.norm_offset_ = cfg.norm_weight_offset();
  p.padding_row_ = cfg.padding_row();
  p.specs_ = parameter_specs(cfg, head);
  p.buffers_.resize(p.specs_.size());
  for (size_t i = 0; i < p.specs_.size(); ++i) p.index_[p.specs_[i].id] = i;
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

std::optional<size_t> ParameterSet::find(const ParamId& id) const {
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::optional<size_t> ParameterSet::find(const std::string& name) const {
  const std::optional<ParamId> id = parse_hf_name(name, layout_);
  return id ? find(*id) : std::nullopt;
}

const Tensor& ParameterSet::get(const std::string& name) const {
  const std::optional<size_t> i = find(name);
  if (!i) throw InputError("no parameter named '" + name + "'");
  return buffers_[*i].view();
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n = checked_add(n, b.view().numel(), "a parameter set's size");
  return n;
}

namespace {

// The field of a layer's views that holds a tensor of this role.
Tensor& layer_view(LayerTensors& t, ParamRole role) {
  switch (role) {
    case ParamRole::input_norm: return t.input_norm;
    case ParamRole::q_proj: return t.q_proj;
    case ParamRole::q_bias: return t.q_bias;
    case ParamRole::k_proj: return t.k_proj;
    case ParamRole::k_bias: return t.k_bias;
    case ParamRole::v_proj: return t.v_proj;
    case ParamRole::v_bias: return t.v_bias;
    case ParamRole::o_proj: return t.o_proj;
    case ParamRole::o_bias: return t.o_bias;
    case ParamRole::q_norm: return t.q_norm;
    case ParamRole::k_norm: return t.k_norm;
    case ParamRole::post_norm: return t.post_norm;
    case ParamRole::attn_out_norm: return t.attn_out_norm;
    case ParamRole::mlp_out_norm: return t.mlp_out_norm;
    case ParamRole::gate_proj: return t.gate_proj;
    case ParamRole::up_proj: return t.up_proj;
    case ParamRole::down_proj: return t.down_proj;
    default: break;
  }
  throw ShapeError(std::string("parameter role ") + hf_module_name(role) + " is not a layer's");
}

Tensor& model_view(ModelTensors& v, ParamRole role) {
  switch (role) {
    case ParamRole::embed: return v.embed;
    case ParamRole::final_norm: return v.final_norm;
    case ParamRole::lm_head: return v.lm_head;
    case ParamRole::score: return v.score;
    default: break;
  }
  throw ShapeError(std::string("parameter role ") + hf_module_name(role) + " is a layer's");
}

}  // namespace

void ParameterSet::build_views() {
  // In place: views held by an engine (a LayerTensors&) stay valid.
  views_.layers.resize(static_cast<size_t>(layers_));
  views_.embed = views_.final_norm = views_.lm_head = views_.score = Tensor();
  for (LayerTensors& t : views_.layers) t = LayerTensors();
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamId& id = specs_[i].id;
    Tensor& view = id.group() == ParamGroup::layer
                       ? layer_view(views_.layers[static_cast<size_t>(id.layer)], id.role)
                       : model_view(views_, id.role);
    view = buffers_[i].view();
  }
  if (head_ == ModelHead::lm && tied_) views_.lm_head = views_.embed;
}

void init_parameters(ParameterSet& params, uint64_t seed, InitStyle style, float std) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    if (!t.data) continue;
    const ParamId& id = params.id(i);
    // One independent stream per tensor (keyed by its name), so adding a tensor does not shift
    // the others.
    Rng rng(seed, params.name(i));
    const bool is_norm = id.kind() == ParamKind::norm;
    const bool is_bias = id.kind() == ParamKind::bias;
    // transformers zeroes nn.Embedding's padding_idx row after drawing the others.
    const int64_t zero_row =
        style == InitStyle::hf && id.role == ParamRole::embed ? params.padding_row() : -1;
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
