#include "convert/gguf_arch.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/parameters.h"

namespace sbp {

namespace {

using json = nlohmann::json;

constexpr GgufArch kArchs[] = {
    {"llama", ModelType::llama, true, false},
    {"qwen2", ModelType::qwen2, false, false},
    {"qwen3", ModelType::qwen3, false, false},
    {"gemma3", ModelType::gemma3_text, false, true},
};

// A float32 metadata value as the shortest decimal that reads back as the same float32: GGUF
// keeps 1e-5 as 9.99999974738e-06, config.json should say 1e-05 as the original did.
double shortest_f32(double v) {
  const float f = static_cast<float>(v);
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  double out = 0.0;
  std::from_chars(buf, r.ptr, out);
  return out;
}

// The number of a key that must be a positive integer.
int64_t positive(const GgufFile& f, const std::string& key) {
  const int64_t v = f.require_int(key);
  if (v < 1) throw InputError(f.path() + ": metadata '" + key + "' is " + std::to_string(v) +
                              " (must be positive)");
  return v;
}

// Each role's GGUF name; a layer's inside "blk.<l>.". Roles are what a tensor does, and so are
// llama.cpp's names: Llama's post_attention_layernorm and Gemma's pre_feedforward_layernorm are
// both the norm before the MLP (post_norm), ffn_norm in either family.
struct GgufName {
  ParamRole role;
  const char* gguf;
};
constexpr GgufName kGgufNames[] = {
    {ParamRole::embed, "token_embd.weight"},
    {ParamRole::final_norm, "output_norm.weight"},
    {ParamRole::lm_head, "output.weight"},
    {ParamRole::input_norm, "attn_norm.weight"},
    {ParamRole::q_proj, "attn_q.weight"},
    {ParamRole::q_bias, "attn_q.bias"},
    {ParamRole::k_proj, "attn_k.weight"},
    {ParamRole::k_bias, "attn_k.bias"},
    {ParamRole::v_proj, "attn_v.weight"},
    {ParamRole::v_bias, "attn_v.bias"},
    {ParamRole::o_proj, "attn_output.weight"},
    {ParamRole::o_bias, "attn_output.bias"},
    {ParamRole::q_norm, "attn_q_norm.weight"},
    {ParamRole::k_norm, "attn_k_norm.weight"},
    {ParamRole::post_norm, "ffn_norm.weight"},
    {ParamRole::attn_out_norm, "post_attention_norm.weight"},
    {ParamRole::mlp_out_norm, "post_ffw_norm.weight"},
    {ParamRole::gate_proj, "ffn_gate.weight"},
    {ParamRole::up_proj, "ffn_up.weight"},
    {ParamRole::down_proj, "ffn_down.weight"},
};  // score (the value head) has none: llama.cpp's decoders end in an LM head.

constexpr std::string_view kBlockPrefix = "blk.";

// The name of a role's tensor in layer 0, for the metadata that asks whether the file has it.
std::string first_block(ParamRole role) { return *gguf_name(layer_param(0, role)); }

}  // namespace

const GgufArch& gguf_arch_by_name(const std::string& arch, const std::string& source) {
  for (const GgufArch& a : kArchs)
    if (arch == a.name) return a;
  throw InputError(source + ": general.architecture '" + arch +
                   "' is not supported (llama, qwen2, qwen3, gemma3 are)");
}

const GgufArch& gguf_arch_for(ModelType t) {
  // Mistral's layers are Llama's; llama.cpp stores Mistral checkpoints as llama.
  if (t == ModelType::mistral) t = ModelType::llama;
  for (const GgufArch& a : kArchs)
    if (a.type == t) return a;
  throw InputError(std::string("model_type ") + model_type_name(t) + " has no GGUF architecture");
}

json gguf_to_config_json(const GgufFile& f, const GgufArch& arch) {
  const std::string a = arch.name;
  const std::string& path = f.path();
  json j;
  ModelType type = arch.type;
  const int64_t d = positive(f, a + ".embedding_length");
  const int64_t H = positive(f, a + ".attention.head_count");
  const int64_t G = f.get_int(a + ".attention.head_count_kv").value_or(H);
  int64_t h = f.get_int(a + ".attention.key_length").value_or(d / H);
  if (const auto vl = f.get_int(a + ".attention.value_length"); vl && *vl != h)
    throw InputError(path + ": metadata '" + a + ".attention.value_length' " +
                     std::to_string(*vl) + " differs from the key length " + std::to_string(h) +
                     " (not supported)");
  if (const auto rd = f.get_int(a + ".rope.dimension_count"); rd && *rd != h)
    throw InputError(path + ": metadata '" + a + ".rope.dimension_count' " + std::to_string(*rd) +
                     " is not the head dimension " + std::to_string(h) +
                     " (partial rotary embeddings are not supported)");
  const std::string embd_name = *gguf_name(model_param(ParamRole::embed));
  const GgufTensorInfo* embd = f.find_tensor(embd_name);
  if (!embd) throw InputError(path + ": tensor '" + embd_name + "' is missing");
  if (embd->ne.size() != 2)
    throw InputError(path + ": tensor '" + embd_name + "' must have 2 dimensions");
  const int64_t V = embd->ne[1];
  if (const auto vs = f.get_int(a + ".vocab_size"); vs && *vs != V)
    throw InputError(path + ": metadata '" + a + ".vocab_size' " + std::to_string(*vs) +
                     " differs from token_embd.weight's " + std::to_string(V) + " rows");

  j["hidden_size"] = d;
  j["intermediate_size"] = positive(f, a + ".feed_forward_length");
  j["num_hidden_layers"] = positive(f, a + ".block_count");
  j["num_attention_heads"] = H;
  j["num_key_value_heads"] = G;
  j["head_dim"] = h;
  j["vocab_size"] = V;
  j["max_position_embeddings"] = positive(f, a + ".context_length");
  const auto eps = f.get_float(a + ".attention.layer_norm_rms_epsilon");
  if (!eps) throw InputError(path + ": metadata '" + a + ".attention.layer_norm_rms_epsilon' is missing");
  j["rms_norm_eps"] = shortest_f32(*eps);
  j["rope_theta"] = shortest_f32(f.get_float(a + ".rope.freq_base").value_or(10000.0));
  j["tie_word_embeddings"] =
      f.find_tensor(*gguf_name(model_param(ParamRole::lm_head))) == nullptr;
  const std::string scaling = f.get_string(a + ".rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    const auto factor = f.get_float(a + ".rope.scaling.factor");
    if (!factor) throw InputError(path + ": metadata '" + a + ".rope.scaling.factor' is missing");
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", shortest_f32(*factor)}};
  } else if (scaling != "none") {
    throw InputError(path + ": metadata '" + a + ".rope.scaling.type' '" + scaling +
                     "' is not supported (none, linear are)");
  }
  const bool has_q_bias = f.find_tensor(first_block(ParamRole::q_bias)) != nullptr;
  const bool has_o_bias = f.find_tensor(first_block(ParamRole::o_bias)) != nullptr;
  switch (arch.type) {
    case ModelType::llama: {
      j["attention_bias"] = has_q_bias;
      if (has_q_bias != has_o_bias)
        throw InputError(path + ": llama with attention biases needs both attn_q.bias and "
                         "attn_output.bias");
      j["hidden_act"] = "silu";
      if (const auto w = f.get_int(a + ".attention.sliding_window"); w && *w > 0) {
        type = ModelType::mistral;  // Llama layers with every layer windowed
        j["sliding_window"] = *w;
      }
      break;
    }
    case ModelType::qwen2:
      j["hidden_act"] = "silu";
      j["use_sliding_window"] = false;
      break;
    case ModelType::qwen3:
      j["attention_bias"] = has_q_bias;
      j["hidden_act"] = "silu";
      j["use_sliding_window"] = false;
      break;
    case ModelType::gemma3_text: {
      j["hidden_activation"] = "gelu_pytorch_tanh";
      const int64_t L = j["num_hidden_layers"].get<int64_t>();
      const int64_t w = f.get_int(a + ".attention.sliding_window").value_or(0);
      // llama.cpp's Gemma 3: every 6th layer attends to everything, the others slide.
      const int64_t pattern = 6;
      json types = json::array();
      for (int64_t l = 0; l < L; ++l)
        types.push_back(w > 0 && (l + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
      j["sliding_window"] = w > 0 ? w : 4096;
      // llama.cpp scales scores by 1/sqrt(head_dim), except for its 62-layer (27B) Gemma 3,
      // where it takes d / H (168) as Google's reference does.
      j["query_pre_attn_scalar"] = L == 62 ? d / H : h;
      j["rope_local_base_freq"] = 10000.0;
      if (const auto c = f.get_float(a + ".final_logit_softcapping"))
        j["final_logit_softcapping"] = shortest_f32(*c);
      break;
    }
    case ModelType::mistral: break;
  }
  j["model_type"] = model_type_name(type);
  j["architectures"] = {std::string(model_class_prefix(type)) + "ForCausalLM"};
  if (const GgufTensorInfo* rf = f.find_tensor("rope_freqs.weight")) {
    // llama3 rope scaling, stored by llama.cpp as the divisor of each unscaled frequency. The
    // four numbers behind it are not stored: find the Llama 3.x parameters (low 1, high 4) and
    // an original context that give these divisors, or refuse.
    if (arch.type != ModelType::llama || rf->ne.size() != 1 || rf->ne[0] != h / 2)
      throw InputError(path + ": tensor 'rope_freqs.weight' must be (head_dim / 2) of a llama");
    std::vector<float> r(static_cast<size_t>(rf->ne[0]));
    f.dequantize_into(*rf, r.data());
    // The longest wavelengths are divided by exactly `factor` (a whole number in every
    // published config); the stored quotient may be an ulp off it.
    float factor = *std::max_element(r.begin(), r.end());
    if (std::fabs(factor - std::round(factor)) <= 1e-4f * factor) factor = std::round(factor);
    if (!std::isfinite(factor) || factor < 1.0f)
      throw InputError(path + ": tensor 'rope_freqs.weight' is not llama3 rope scaling (largest "
                       "divisor " + std::to_string(factor) + ")");
    for (int64_t orig = 64; orig <= (int64_t{1} << 20); orig *= 2) {
      json jj = j;
      jj["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", shortest_f32(factor)},
                            {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", orig}};
      const std::vector<float> want = llama3_rope_factors(ModelConfig::from_json(jj, path));
      bool same = true;
      for (size_t i = 0; i < r.size() && same; ++i)
        same = std::fabs(want[i] - r[i]) <= 1e-5f * std::fabs(r[i]);
      if (same) return jj;
    }
    throw InputError(path + ": tensor 'rope_freqs.weight' is not llama3 rope scaling with "
                     "low_freq_factor 1, high_freq_factor 4 (not supported)");
  }
  return j;
}

std::vector<float> llama3_rope_factors(const ModelConfig& cfg) {
  ModelConfig plain = cfg;
  plain.rope_scaling.type = RopeScalingType::none;
  const std::vector<float> base = plain.rope_inv_freq(), scaled = cfg.rope_inv_freq();
  std::vector<float> r(base.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = base[i] / scaled[i];
  return r;
}

std::vector<std::pair<std::string, GgufValue>> config_to_gguf_metadata(const ModelConfig& cfg) {
  const GgufArch& arch = gguf_arch_for(cfg.model_type);
  const std::string a = arch.name;
  if (cfg.rope_scaling.type == RopeScalingType::llama3 && a != "llama")
    throw InputError(std::string("convert: llama3 rope scaling on ") + model_type_name(cfg.model_type) +
                     " cannot be exported (llama.cpp reads rope_freqs for llama only)");
  // The export writes no yarn or dynamic metadata (not implemented): refused rather than
  // exported as a model with the default rope.
  if (cfg.rope_scaling.type == RopeScalingType::yarn ||
      cfg.rope_scaling.type == RopeScalingType::dynamic)
    throw InputError(std::string("convert: ") + cfg.rope_scaling_description() +
                     " rope scaling cannot be exported to GGUF (not supported)");
  if (cfg.gemma() && cfg.final_logit_softcapping != 0.0)
    throw InputError("convert: Gemma 3 with final_logit_softcapping cannot be exported "
                     "(llama.cpp's gemma3 has none)");
  if (cfg.gemma()) {
    // llama.cpp's gemma3 fixes what transformers' config leaves open: refuse what it would run
    // differently.
    const int64_t L = cfg.num_hidden_layers;
    const double scalar = L == 62 ? static_cast<double>(cfg.hidden_size / cfg.num_attention_heads)
                                  : static_cast<double>(cfg.head_dim);
    if (cfg.query_pre_attn_scalar != scalar)
      throw InputError("convert: Gemma 3 with query_pre_attn_scalar " +
                       std::to_string(cfg.query_pre_attn_scalar) +
                       " cannot be exported (llama.cpp uses " + std::to_string(scalar) + ")");
    if (cfg.rope_local_base_freq != 10000.0)
      throw InputError("convert: Gemma 3 with rope_local_base_freq other than 10000 cannot be "
                       "exported (llama.cpp fixes it)");
    for (int64_t l = 0; l < L; ++l)
      if (cfg.layer_is_sliding(l) != ((l + 1) % 6 != 0))
        throw InputError("convert: Gemma 3 whose layer " + std::to_string(l) +
                         " breaks the pattern of 5 sliding layers then 1 full cannot be exported "
                         "(llama.cpp fixes the pattern)");
  }
  std::vector<std::pair<std::string, GgufValue>> m;
  auto u32 = [&](const std::string& k, int64_t v) {
    m.emplace_back(a + "." + k, GgufValue::u32(static_cast<uint32_t>(v)));
  };
  auto f32 = [&](const std::string& k, double v) {
    m.emplace_back(a + "." + k, GgufValue::f32(static_cast<float>(v)));
  };
  m.emplace_back("general.architecture", GgufValue::str(a));
  m.emplace_back("general.name", GgufValue::str("streambp export"));
  u32("block_count", cfg.num_hidden_layers);
  u32("context_length", cfg.max_position_embeddings);
  u32("embedding_length", cfg.hidden_size);
  u32("feed_forward_length", cfg.intermediate_size);
  u32("attention.head_count", cfg.num_attention_heads);
  u32("attention.head_count_kv", cfg.num_key_value_heads);
  f32("rope.freq_base", cfg.rope_theta);
  f32("attention.layer_norm_rms_epsilon", cfg.rms_norm_eps);
  u32("attention.key_length", cfg.head_dim);
  u32("attention.value_length", cfg.head_dim);
  if (a == "llama") {
    u32("vocab_size", cfg.vocab_size);
    u32("rope.dimension_count", cfg.head_dim);
  }
  if (cfg.rope_scaling.type == RopeScalingType::linear) {
    m.emplace_back(a + ".rope.scaling.type", GgufValue::str("linear"));
    f32("rope.scaling.factor", cfg.rope_scaling.factor);
  }
  // Gemma's window; Mistral's (llama.cpp's llama ignores it, our import turns it back into
  // model_type mistral).
  if ((cfg.gemma() || cfg.model_type == ModelType::mistral) && cfg.has_sliding_layers())
    u32("attention.sliding_window", cfg.sliding_window);
  return m;
}

std::optional<std::string> gguf_name(const ParamId& id) {
  for (const GgufName& n : kGgufNames) {
    if (n.role != id.role) continue;
    if (id.group() == ParamGroup::layer)
      return std::string(kBlockPrefix) + std::to_string(id.layer) + "." + n.gguf;
    return std::string(n.gguf);
  }
  return std::nullopt;
}

std::string gguf_tensor_name(const ModelConfig& cfg, const ParamId& id) {
  if (std::optional<std::string> name = gguf_name(id)) return *name;
  throw InputError("convert: tensor '" + hf_name(id, norm_layout(cfg)) + "' has no GGUF name");
}

std::optional<ParamId> parse_gguf_name(const std::string& name) {
  if (name.starts_with(kBlockPrefix)) {
    const size_t dot = name.find('.', kBlockPrefix.size());
    if (dot == std::string::npos) return std::nullopt;
    const auto layer =
        parse_layer_number(name.substr(kBlockPrefix.size(), dot - kBlockPrefix.size()));
    if (!layer) return std::nullopt;
    const std::string rest = name.substr(dot + 1);
    for (const GgufName& n : kGgufNames)
      if (model_param(n.role).group() == ParamGroup::layer && rest == n.gguf)
        return layer_param(*layer, n.role);
    return std::nullopt;
  }
  for (const GgufName& n : kGgufNames)
    if (model_param(n.role).group() != ParamGroup::layer && name == n.gguf)
      return model_param(n.role);
  return std::nullopt;
}

void permute_qk_rows(float* w, int64_t heads, int64_t h, int64_t cols, bool to_gguf) {
  const int64_t half = h / 2;
  std::vector<float> tmp(static_cast<size_t>(h * cols));
  for (int64_t head = 0; head < heads; ++head) {
    float* base = w + head * h * cols;
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t i = 0; i < half; ++i) {
        const int64_t hf_row = s * half + i, gguf_row = 2 * i + s;
        const int64_t from = to_gguf ? hf_row : gguf_row, to = to_gguf ? gguf_row : hf_row;
        std::copy_n(base + from * cols, cols, tmp.data() + to * cols);
      }
    std::copy(tmp.begin(), tmp.end(), base);
  }
}

bool is_permuted_qk(const ModelConfig& cfg, const ParamId& id, int64_t* heads) {
  if (!gguf_arch_for(cfg.model_type).permute_qk) return false;
  switch (id.role) {
    case ParamRole::q_proj:
    case ParamRole::q_bias: *heads = cfg.num_attention_heads; return true;
    case ParamRole::k_proj:
    case ParamRole::k_bias: *heads = cfg.num_key_value_heads; return true;
    default: return false;
  }
}

bool is_norm_weight(const ParamId& id) { return id.kind() == ParamKind::norm; }

}  // namespace sbp
