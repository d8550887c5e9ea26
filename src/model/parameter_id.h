#pragma once
// A parameter's identity as a value: its role in the decoder and its layer, not a string. The
// Hugging Face names are spelled from one table (parameter_id.cpp) and parsed back by the same
// table; the GGUF names (convert/gguf_arch.cpp) and PEFT's adapter names (model/lora.cpp) are
// built on it. Code that needs to know what a tensor is asks its ParamId, never its name.
#include <cstdint>
#include <optional>
#include <string>

namespace sbp {

// What a tensor does. The layer roles are the fields of LayerTensors (parameters.h): they name
// the function, not the Hugging Face spelling, which differs by family for one norm (below).
enum class ParamRole : int {
  embed,       // model.embed_tokens.weight
  final_norm,  // model.norm.weight
  lm_head,     // lm_head.weight (absent when tied)
  score,       // score.weight, the value head of value models
  input_norm,
  q_proj,
  q_bias,
  k_proj,
  k_bias,
  v_proj,
  v_bias,
  o_proj,
  o_bias,
  q_norm,
  k_norm,
  post_norm,      // the norm before the MLP
  attn_out_norm,  // Gemma: on the attention output
  mlp_out_norm,   // Gemma: on the MLP output
  gate_proj,
  up_proj,
  down_proj,
};

// Which gradient group (engine/grad_hook.h) a tensor's gradient belongs to.
enum class ParamGroup { embedding, layer, head };

// What init_parameters draws for it.
enum class ParamKind { matrix, norm, bias };

struct ParamId {
  ParamRole role = ParamRole::embed;
  int64_t layer = -1;  // the decoder layer of a layer role; -1 for the others

  ParamGroup group() const;
  ParamKind kind() const;
  auto operator<=>(const ParamId&) const = default;
};

inline ParamId layer_param(int64_t layer, ParamRole role) { return {role, layer}; }
inline ParamId model_param(ParamRole role) { return {role, -1}; }

// Gemma's four norms a layer against Llama's two. Hugging Face spells Gemma's norm before the
// MLP "pre_feedforward_layernorm" and reuses "post_attention_layernorm" for the norm on the
// attention output; Llama's "post_attention_layernorm" is the norm before the MLP. The one
// place where a name's meaning depends on the family.
enum class NormLayout { plain, sandwich };

// The Hugging Face module path, e.g. "model.layers.3.self_attn.q_proj" (a bias and a weight
// share it), and the tensor name, "model.layers.3.self_attn.q_proj.weight". Throws ShapeError
// for a role this layout has not (attn_out_norm, mlp_out_norm without sandwich norms).
std::string hf_module_path(const ParamId& id, NormLayout layout);
std::string hf_name(const ParamId& id, NormLayout layout);
// The last component of the module path, "q_proj": PEFT's target module names.
const char* hf_module_name(ParamRole role);
// The inverse of hf_name; nullopt for a name no role of this layout spells (an unknown tensor,
// or a layer number written otherwise than hf_name writes it).
std::optional<ParamId> parse_hf_name(const std::string& name, NormLayout layout);

// The roles in table order, for loops and tests.
inline constexpr int kParamRoles = static_cast<int>(ParamRole::down_proj) + 1;

// "12" -> 12 for a layer number written as std::to_string writes it (no sign, no leading zero);
// nullopt otherwise. Shared by the name tables that embed a layer number.
std::optional<int64_t> parse_layer_number(const std::string& digits);

}  // namespace sbp
