#include "model/config.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/checked_math.h"
#include "core/untrusted_json.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/input_file.h"

namespace sbp {

namespace {

using json = nlohmann::json;

// Reads an integer field; `required` fields must be present. Integral floats (4096.0) are
// accepted as JSON writers sometimes produce them; values outside int64 are rejected rather
// than wrapped or cast with undefined behaviour.
int64_t get_int(const json& j, const char* key, const std::string& src, bool required,
                int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw InputError(src + ": missing required field '" + key + "'");
    return fallback;
  }
  if (it->is_number_unsigned()) {
    if (it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      throw InputError(src + ": field '" + key + "' is out of range: " + it->dump());
    return static_cast<int64_t>(it->get<uint64_t>());
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    const double v = it->get<double>();
    // 2^63 is exactly representable; anything at or beyond it does not fit.
    if (std::floor(v) == v && std::fabs(v) < 9223372036854775808.0) return static_cast<int64_t>(v);
  }
  throw InputError(src + ": field '" + key + "' must be an integer, got " + it->dump());
}

double get_num(const json& j, const char* key, const std::string& src, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw InputError(src + ": field '" + key + "' must be a number");
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, const std::string& src, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InputError(src + ": field '" + key + "' must be true or false");
  return it->get<bool>();
}

// Fields this engine interprets; everything else goes to `extra` and is written back.
const char* const kKnownFields[] = {"model_type",
                                    "hidden_size",
                                    "intermediate_size",
                                    "num_hidden_layers",
                                    "num_attention_heads",
                                    "num_key_value_heads",
                                    "head_dim",
                                    "vocab_size",
                                    "max_position_embeddings",
                                    "rms_norm_eps",
                                    "rope_theta",
                                    "rope_scaling",
                                    "tie_word_embeddings",
                                    "attention_bias",
                                    "torch_dtype",
                                    "dtype",
                                    "rope_parameters",
                                    "pad_token_id"};

// Gemma 3 fields, interpreted (and so rewritten by to_json) only for gemma3_text configs: a Qwen2
// config's unused sliding_window must still be written back as it was.
const char* const kGemmaFields[] = {"query_pre_attn_scalar",   "sliding_window",
                                    "sliding_window_pattern",  "layer_types",
                                    "rope_local_base_freq",    "final_logit_softcapping",
                                    "attn_logit_softcapping",  "hidden_activation",
                                    "hidden_act",              "_sliding_window_pattern",
                                    "use_bidirectional_attention"};

// Qwen2 / Qwen3 window fields, interpreted and rewritten by to_json only when parse_windows
// read a window: a Qwen2.5 config's unused sliding_window: 131072 with use_sliding_window: false
// is written back as it was. (max_window_layers is never rewritten: layer_types says which
// layers slide, and wins in transformers.)
const char* const kWindowFields[] = {"use_sliding_window", "sliding_window", "layer_types"};

// Mistral's window fields, always interpreted: to_json writes sliding_window (an integer or
// null) from the parsed window, and layer_types is only checked (transformers' MistralConfig
// ignores it; see parse_mistral_window).
const char* const kMistralFields[] = {"sliding_window", "layer_types"};

// An optional number of a rope object: absent or null leaves `out` unset.
void get_opt_num(const json& r, const char* key, const std::string& where,
                 std::optional<double>* out) {
  if (auto it = r.find(key); it != r.end() && !it->is_null()) *out = get_num(r, key, where, 0.0);
}

// Parses a rope_scaling (transformers <= 4.x) or rope_parameters (transformers 5) object.
// yarn's original_max_position_embeddings is left 0 when absent (a given value must be >= 1):
// from_json resolves it against the config's max_position_embeddings, as transformers'
// standardize_rope_params does.
void parse_rope(const json& r, const std::string& src, const char* field, RopeScaling* out) {
  if (!r.is_object()) throw InputError(src + ": field '" + field + "' must be an object");
  std::string type;
  if (auto t = r.find("rope_type"); t != r.end() && t->is_string())
    type = *t;
  else if (auto t2 = r.find("type"); t2 != r.end() && t2->is_string())
    type = *t2;
  if (type == "default") type.clear();
  if (!type.empty() && type != "llama3" && type != "linear" && type != "yarn" &&
      type != "dynamic") {
    throw InputError(src + ": " + field + " type '" + type +
                     "' is not supported (only llama3, linear, yarn and dynamic)");
  }
  out->type = type.empty()          ? RopeScalingType::none
              : type == "linear"    ? RopeScalingType::linear
              : type == "yarn"      ? RopeScalingType::yarn
              : type == "dynamic"   ? RopeScalingType::dynamic
                                    : RopeScalingType::llama3;
  const std::string where = src + " " + field;
  if (out->type == RopeScalingType::linear || out->type == RopeScalingType::dynamic ||
      out->type == RopeScalingType::yarn) {
    if (!r.contains("factor") || r["factor"].is_null())
      throw InputError(where + ": " + type + " scaling needs a 'factor'");
    out->factor = get_num(r, "factor", where, 1.0);
  }
  if (out->type == RopeScalingType::llama3) {
    out->factor = get_num(r, "factor", where, 8.0);
    out->low_freq_factor = get_num(r, "low_freq_factor", where, 1.0);
    out->high_freq_factor = get_num(r, "high_freq_factor", where, 4.0);
    out->original_max_position_embeddings =
        get_int(r, "original_max_position_embeddings", where, false, 8192);
  }
  if (out->type == RopeScalingType::yarn) {
    out->original_max_position_embeddings =
        get_int(r, "original_max_position_embeddings", where, false, 0);
    if (r.contains("original_max_position_embeddings") &&
        !r["original_max_position_embeddings"].is_null() &&
        out->original_max_position_embeddings < 1)
      throw InputError(where + ": 'original_max_position_embeddings' must be >= 1, got " +
                       std::to_string(out->original_max_position_embeddings));
    get_opt_num(r, "beta_fast", where, &out->beta_fast);
    get_opt_num(r, "beta_slow", where, &out->beta_slow);
    get_opt_num(r, "attention_factor", where, &out->attention_factor);
    get_opt_num(r, "mscale", where, &out->mscale);
    get_opt_num(r, "mscale_all_dim", where, &out->mscale_all_dim);
    if (auto it = r.find("truncate"); it != r.end() && !it->is_null())
      out->truncate = get_bool(r, "truncate", where, true);
  }
  // Fields another type would use are not silently ignored when they change the rope.
  if (out->type != RopeScalingType::yarn) {
    for (const char* k : {"beta_fast", "beta_slow", "attention_factor", "mscale",
                          "mscale_all_dim", "truncate"})
      if (r.contains(k) && !r[k].is_null())
        throw InputError(where + ": field '" + k + "' is a yarn field; this rope is '" +
                         (type.empty() ? std::string("default") : type) + "'");
  }
}

// yarn's original_max_position_embeddings, as transformers' standardize_rope_params resolves
// it: a top-level field of that name wins (its Phi-3 rule, for a rope that is not per layer
// type), then the rope's own, then max_position_embeddings.
void resolve_original_positions(const json& j, const std::string& src, ModelConfig* c) {
  RopeScaling& r = c->rope_scaling;
  if (r.type != RopeScalingType::yarn) return;
  if (!c->gemma() && j.contains("original_max_position_embeddings") &&
      !j["original_max_position_embeddings"].is_null())
    r.original_max_position_embeddings =
        get_int(j, "original_max_position_embeddings", src, true, 0);
  else if (r.original_max_position_embeddings == 0)
    r.original_max_position_embeddings = c->max_position_embeddings;
}

// The rope object to_json writes for a scaled rope (the fields transformers reads back).
json rope_json(const RopeScaling& r) {
  json o;
  switch (r.type) {
    case RopeScalingType::none: return json(nullptr);
    case RopeScalingType::linear: return {{"rope_type", "linear"}, {"factor", r.factor}};
    case RopeScalingType::dynamic: return {{"rope_type", "dynamic"}, {"factor", r.factor}};
    case RopeScalingType::llama3:
      return {{"rope_type", "llama3"},
              {"factor", r.factor},
              {"low_freq_factor", r.low_freq_factor},
              {"high_freq_factor", r.high_freq_factor},
              {"original_max_position_embeddings", r.original_max_position_embeddings}};
    case RopeScalingType::yarn:
      o = {{"rope_type", "yarn"},
           {"factor", r.factor},
           {"original_max_position_embeddings", r.original_max_position_embeddings}};
      if (r.beta_fast) o["beta_fast"] = *r.beta_fast;
      if (r.beta_slow) o["beta_slow"] = *r.beta_slow;
      if (r.attention_factor) o["attention_factor"] = *r.attention_factor;
      if (r.mscale) o["mscale"] = *r.mscale;
      if (r.mscale_all_dim) o["mscale_all_dim"] = *r.mscale_all_dim;
      if (r.truncate) o["truncate"] = *r.truncate;
      return o;
  }
  return json(nullptr);
}


// layer_types: one "sliding_attention" / "full_attention" per layer (Gemma 3, Qwen2, Qwen3).
std::vector<bool> parse_layer_types(const json& lt, int64_t L, const std::string& src) {
  if (!lt.is_array())
    throw InputError(src + ": field 'layer_types' must be an array of \"sliding_attention\" / "
                           "\"full_attention\"");
  if (static_cast<int64_t>(lt.size()) != L)
    throw InputError(src + ": field 'layer_types' has " + std::to_string(lt.size()) +
                     " entries but num_hidden_layers is " + std::to_string(L));
  std::vector<bool> sliding;
  for (size_t i = 0; i < lt.size(); ++i) {
    const json& e = lt[i];
    if (!e.is_string() || (e != "sliding_attention" && e != "full_attention"))
      throw InputError(src + ": field 'layer_types'[" + std::to_string(i) + "] is " + e.dump() +
                       " (expected \"sliding_attention\" or \"full_attention\")");
    sliding.push_back(e == "sliding_attention");
  }
  return sliding;
}

// transformers' Qwen2Config / Qwen3Config default: the first layer that slides.
constexpr int64_t kDefaultMaxWindowLayers = 28;

// Qwen2's and Qwen3's max_window_layers. It stays in ModelConfig::extra (written back as it
// was): only set_num_layers needs it, to give layers a --layers override adds their type.
int64_t max_window_layers(const json& extra) {
  if (!extra.is_object()) return kDefaultMaxWindowLayers;
  return get_int(extra, "max_window_layers", "config", false, kDefaultMaxWindowLayers);
}

// MistralConfig's default window (transformers 5.24: `sliding_window: int | None = 4096`, the
// window of Mistral 7B v0.1): what a config without the key means.
constexpr int64_t kDefaultMistralWindow = 4096;

// Mistral's window, read as transformers 5.24's MistralModel reads it: every layer gets the
// sliding-window mask (masking_utils' kv_idx > q_idx - w, as for Qwen2 below) when
// sliding_window is an integer, the causal mask when it is null; a missing key is the
// config class's default, 4096. MistralConfig ignores layer_types (it logs a warning pointing
// at Ministral), so a layer_types that says something else than "every layer alike" would be
// two different models depending on the reader: refused rather than guessed.
void parse_mistral_window(const json& j, const std::string& src, ModelConfig* c) {
  if (get_bool(j, "use_sliding_window", src, false))
    throw InputError(src + ": 'use_sliding_window': true is not a Mistral field (Qwen2 and Qwen3 "
                           "only); a Mistral config's window is 'sliding_window' (null: none)");
  const auto sw = j.find("sliding_window");
  const bool has_window = sw == j.end() || !sw->is_null();
  const int64_t w = get_int(j, "sliding_window", src, false, kDefaultMistralWindow);
  if (has_window && w <= 0)
    throw InputError(src + ": field 'sliding_window' must be a positive integer or null (full "
                           "attention), got " + std::to_string(w));
  const int64_t L = std::clamp<int64_t>(c->num_hidden_layers, 0, kMaxLayers);
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    const std::vector<bool> types = parse_layer_types(*it, c->num_hidden_layers, src);
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != has_window)
        throw InputError(src + ": field 'layer_types'[" + std::to_string(i) + "] is \"" +
                         (types[i] ? "sliding_attention" : "full_attention") +
                         "\", but transformers' MistralForCausalLM ignores layer_types and gives " +
                         "every layer " +
                         (has_window ? "the window 'sliding_window'" : "full attention") +
                         " (alternating layers are model_type 'ministral', not supported)");
    }
  }
  if (!has_window) return;
  c->sliding_window = w;
  c->layer_sliding.assign(static_cast<size_t>(L), true);
}

// The sliding windows of Qwen2 / Qwen3 (use_sliding_window), read as transformers 5 reads
// them: Qwen2Config / Qwen3Config set sliding_window to None unless use_sliding_window;
// without layer_types, layer i is "sliding_attention" iff a window is set and
// i >= max_window_layers (default 28). The mask is masking_utils' sliding_window_overlay,
// kv_idx > q_idx - w: a row sees itself and w - 1 keys before it, as AttentionDims::window
// (Gemma's rule too). Returns true when the fields are interpreted (to_json then writes them).
bool parse_windows(const json& j, const std::string& src, ModelConfig* c) {
  const int64_t L = std::clamp<int64_t>(c->num_hidden_layers, 0, kMaxLayers);
  const auto sw = j.find("sliding_window");
  const bool null_window = sw != j.end() && sw->is_null();
  if (c->model_type == ModelType::mistral) {
    parse_mistral_window(j, src, c);
    return false;  // kWindowFields stay as they are; kMistralFields are handled by from_json
  }
  if (c->model_type != ModelType::qwen2 && c->model_type != ModelType::qwen3) {
    if (get_bool(j, "use_sliding_window", src, false))
      throw InputError(src + ": 'use_sliding_window': true is not supported for " +
                       model_type_name(c->model_type) + " (Qwen2 and Qwen3 only)");
    return false;
  }
  const bool use = get_bool(j, "use_sliding_window", src, false);
  const bool has_window = use && !null_window;
  const int64_t w = has_window ? get_int(j, "sliding_window", src, false, 4096) : 0;
  const int64_t first = get_int(j, "max_window_layers", src, false, kDefaultMaxWindowLayers);
  std::vector<bool> types;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    types = parse_layer_types(*it, c->num_hidden_layers, src);
  } else {
    for (int64_t i = 0; i < L; ++i) types.push_back(has_window && i >= first);
  }
  const bool any = std::find(types.begin(), types.end(), true) != types.end();
  // transformers fails on this model ("'NoneType' object cannot be interpreted as an integer").
  if (any && !has_window)
    throw InputError(src + ": 'layer_types' has sliding_attention layers but there is no window "
                           "('use_sliding_window' is false or 'sliding_window' is null)");
  if (!has_window) return false;  // every field stays as it was, in `extra`
  c->sliding_window = w;
  c->layer_sliding = std::move(types);
  return true;
}

// A string field: absent or null gives `fallback`.
std::string get_string(const json& j, const char* key, const std::string& src,
                       const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw InputError(src + ": field '" + key + "' must be a string");
  return it->get<std::string>();
}

// The Gemma 3 (gemma3_text) fields. c already holds the common ones (num_hidden_layers, the
// top-level rope_theta and rope_scaling, which transformers reads as the full-attention layers'
// rope, as do we).
void parse_gemma3(const json& j, const std::string& src, ModelConfig* c) {
  const std::string act = get_string(
      j, "hidden_activation", src, get_string(j, "hidden_act", src, "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
    throw InputError(src + ": field 'hidden_activation' is '" + act +
                     "'; Gemma 3 support implements gelu_pytorch_tanh only");
  c->query_pre_attn_scalar = get_num(j, "query_pre_attn_scalar", src, 256.0);
  c->sliding_window = get_int(j, "sliding_window", src, false, 4096);
  c->rope_local_base_freq = get_num(j, "rope_local_base_freq", src, 10000.0);
  if (auto it = j.find("final_logit_softcapping"); it != j.end() && !it->is_null()) {
    if (!it->is_number())
      throw InputError(src + ": field 'final_logit_softcapping' must be a number or null");
    c->final_logit_softcapping = it->get<double>();
    if (!std::isfinite(c->final_logit_softcapping) || !(c->final_logit_softcapping > 0))
      throw InputError(src + ": field 'final_logit_softcapping' must be a finite number > 0 " +
                       "(or null), got " + it->dump());
  }
  // transformers' Gemma3Attention never passes attn_logit_softcapping to its attention
  // functions, and the published Gemma 3 configs set it to null: a value here would mean two
  // different models depending on who reads it, so it is refused rather than guessed.
  if (auto it = j.find("attn_logit_softcapping"); it != j.end() && !it->is_null())
    throw InputError(src + ": field 'attn_logit_softcapping' = " + it->dump() +
                     " is not supported (Gemma 3 checkpoints set it to null, and transformers' "
                     "Gemma3 attention does not apply it)");
  if (get_bool(j, "use_bidirectional_attention", src, false))
    throw InputError(src + ": 'use_bidirectional_attention': true is not supported (causal LM)");

  const int64_t L = c->num_hidden_layers;
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    c->layer_sliding = parse_layer_types(*it, L, src);
  } else {
    // The older spelling: every `pattern`-th layer is a full-attention layer.
    const int64_t pattern = get_int(j, "sliding_window_pattern", src, false, 6);
    if (pattern < 1)
      throw InputError(src + ": field 'sliding_window_pattern' must be >= 1, got " +
                       std::to_string(pattern));
    for (int64_t i = 0; i < std::max<int64_t>(L, 0) && i < kMaxLayers; ++i)
      c->layer_sliding.push_back((i + 1) % pattern != 0);
  }

  // transformers 5: rope_parameters = {"full_attention": {...}, "sliding_attention": {...}},
  // each with rope_theta and rope_type. It wins over the top-level fields, as in transformers.
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw InputError(src + ": field 'rope_parameters' must be an object");
    for (auto f = it->begin(); f != it->end(); ++f) {
      if (f.key() != "full_attention" && f.key() != "sliding_attention")
        throw InputError(src + ": rope_parameters has an entry '" + f.key() +
                         "' (a Gemma 3 config has 'full_attention' and 'sliding_attention')");
    }
    if (auto f = it->find("full_attention"); f != it->end() && !f->is_null()) {
      const std::string where = src + " rope_parameters.full_attention";
      if (!f->is_object()) throw InputError(where + ": must be an object");
      c->rope_theta = get_num(*f, "rope_theta", where, c->rope_theta);
      c->rope_scaling = RopeScaling();
      parse_rope(*f, src, "rope_parameters.full_attention", &c->rope_scaling);
      // transformers' yarn reads `truncate` from the top level of rope_parameters, where a
      // per-layer-type config has none: it truncates whatever the layer's entry says.
      if (c->rope_scaling.truncate && !*c->rope_scaling.truncate)
        throw InputError(where + ": 'truncate': false is not applied by transformers in a "
                                 "per-layer-type rope_parameters (it truncates); remove it");
    }
    if (auto f = it->find("sliding_attention"); f != it->end() && !f->is_null()) {
      const std::string where = src + " rope_parameters.sliding_attention";
      if (!f->is_object()) throw InputError(where + ": must be an object");
      c->rope_local_base_freq = get_num(*f, "rope_theta", where, c->rope_local_base_freq);
      RopeScaling local;
      parse_rope(*f, src, "rope_parameters.sliding_attention", &local);
      if (local.type != RopeScalingType::none)
        throw InputError(where + ": only the default rope is supported on sliding layers");
    }
  }
}

}  // namespace

const char* model_type_name(ModelType t) { return enum_name<ModelType>(kModelTypeNames, t); }

const char* model_class_prefix(ModelType t) {
  switch (t) {
    case ModelType::llama: return "Llama";
    case ModelType::qwen2: return "Qwen2";
    case ModelType::qwen3: return "Qwen3";
    case ModelType::gemma3_text: return "Gemma3";
    case ModelType::mistral: return "Mistral";
  }
  return "?";
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& src) {
  if (!j.is_object()) throw InputError(src + ": config must be a JSON object");
  ModelConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string())
    throw InputError(src + ": missing string field 'model_type'");
  const std::string type = mt->get<std::string>();
  if (type == "gemma3")
    throw InputError(src + ": model_type 'gemma3' is the multimodal Gemma3ForConditionalGeneration "
                           "(vision tower + language model); streambp trains the text model only: "
                           "use a Gemma3ForCausalLM checkpoint (model_type 'gemma3_text', e.g. "
                           "gemma-3-1b) or save the language model on its own with transformers");
  if (!try_parse_enum<ModelType>(kModelTypeNames, type, &c.model_type)) {
    throw InputError(src + ": unsupported model_type '" + type +
                     "' (supported: " + enum_choices<ModelType>(kModelTypeNames) + ")");
  }
  c.hidden_size = get_int(j, "hidden_size", src, true, 0);
  c.intermediate_size = get_int(j, "intermediate_size", src, true, 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", src, true, 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", src, true, 0);
  const bool gemma = c.gemma();
  const bool mistral = c.model_type == ModelType::mistral;
  // MistralConfig's defaults differ from Llama's: 8 kv heads (not one per query head) and
  // 4096 * 32 positions. A missing key means what it means to transformers.
  c.num_key_value_heads =
      get_int(j, "num_key_value_heads", src, false, mistral ? 8 : c.num_attention_heads);
  c.head_dim = get_int(j, "head_dim", src, false,
                       c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.vocab_size = get_int(j, "vocab_size", src, true, 0);
  if (gemma && !j.contains("head_dim")) c.head_dim = 256;  // Gemma3TextConfig's default
  c.max_position_embeddings = get_int(j, "max_position_embeddings", src, false,
                                      gemma || mistral ? 131072 : 32768);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", src, 1e-6);
  c.rope_theta = get_num(j, "rope_theta", src, gemma ? 1e6 : 10000.0);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", src, gemma);
  c.attention_bias = get_bool(j, "attention_bias", src, false);
  if (auto it = j.find("pad_token_id"); it == j.end()) {
    if (gemma) c.pad_token_id = 0;
  } else if (!it->is_null()) {
    c.pad_token_id = get_int(j, "pad_token_id", src, true, 0);
  }
  // transformers >= 4.56 writes "dtype" instead of "torch_dtype".
  if (auto it = j.find("torch_dtype"); it != j.end() && it->is_string())
    c.torch_dtype = it->get<std::string>();
  else if (auto d = j.find("dtype"); d != j.end() && d->is_string())
    c.torch_dtype = d->get<std::string>();

  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    parse_rope(*it, src, "rope_scaling", &c.rope_scaling);
  }
  if (gemma) {
    parse_gemma3(j, src, &c);
  } else if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    // transformers 5 moves rope_theta and the scaling into "rope_parameters"; without reading
    // it a Qwen3 config would silently get theta = 10000 instead of 1e6.
    if (!it->is_object()) throw InputError(src + ": field 'rope_parameters' must be an object");
    if (!j.contains("rope_theta") || j["rope_theta"].is_null())
      c.rope_theta = get_num(*it, "rope_theta", src + " rope_parameters", c.rope_theta);
    auto rs = j.find("rope_scaling");
    if (rs == j.end() || rs->is_null()) parse_rope(*it, src, "rope_parameters", &c.rope_scaling);
  }
  // Features that change the computation and that we do not implement are refused, not ignored.
  if (get_bool(j, "mlp_bias", src, false))
    throw InputError(src + ": 'mlp_bias': true is not supported");
  const bool windows = parse_windows(j, src, &c);
  if (auto it = j.find("hidden_act"); !gemma && it != j.end() && it->is_string() && *it != "silu")
    throw InputError(src + ": hidden_act '" + it->get<std::string>() + "' is not supported (silu)");
  if (auto it = j.find("partial_rotary_factor");
      it != j.end() && it->is_number() && it->get<double>() != 1.0)
    throw InputError(src + ": partial_rotary_factor != 1 is not supported");

  resolve_original_positions(j, src, &c);

  c.extra = json::object();
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnownFields) known = known || it.key() == k;
    for (const char* k : kGemmaFields) known = known || (gemma && it.key() == k);
    for (const char* k : kWindowFields) known = known || (windows && it.key() == k);
    for (const char* k : kMistralFields) known = known || (mistral && it.key() == k);
    if (!known) c.extra[it.key()] = it.value();
  }
  c.validate(src);
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open config file");
  json j;
  try {
    j = parse_untrusted_json(in, path);
  } catch (const json::exception& e) {
    // Not only parse_error: a number past double's range (1e999) is out_of_range.
    throw InputError(path + ": invalid JSON: " + e.what());
  }
  return from_json(j, path);
}

namespace {

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Checks the fields of a yarn or dynamic rope: values its formula cannot use are refused here,
// named, rather than turned into NaN frequencies.
void validate_scaled_rope(const RopeScaling& r, const std::string& src) {
  const auto finite_pos = [&](const char* k, double v) {
    if (!std::isfinite(v) || !(v > 0))
      throw InputError(src + ": rope_scaling '" + k + "' must be positive and finite, got " +
                       fmt_double(v));
  };
  finite_pos("factor", r.factor);
  if (r.type != RopeScalingType::yarn) return;
  if (r.original_max_position_embeddings <= 0 ||
      r.original_max_position_embeddings > kMaxPositionEmbeddings)
    throw InputError(src + ": rope_scaling 'original_max_position_embeddings' must be in [1, " +
                     std::to_string(kMaxPositionEmbeddings) + "], got " +
                     std::to_string(r.original_max_position_embeddings));
  // 0 means the default to transformers (`or 32`, `or 1`); a negative count of rotations has
  // no correction dimension (log of a negative number).
  if (r.beta_fast && (!std::isfinite(*r.beta_fast) || *r.beta_fast < 0))
    throw InputError(src + ": rope_scaling 'beta_fast' must be >= 0 and finite, got " +
                     fmt_double(*r.beta_fast));
  if (r.beta_slow && (!std::isfinite(*r.beta_slow) || *r.beta_slow < 0))
    throw InputError(src + ": rope_scaling 'beta_slow' must be >= 0 and finite, got " +
                     fmt_double(*r.beta_slow));
  const double fast = r.beta_fast && *r.beta_fast != 0 ? *r.beta_fast : 32.0;
  const double slow = r.beta_slow && *r.beta_slow != 0 ? *r.beta_slow : 1.0;
  if (!(fast >= slow))
    throw InputError(src + ": rope_scaling 'beta_fast' (" + fmt_double(fast) +
                     ") must be >= 'beta_slow' (" + fmt_double(slow) + ")");
  if (r.attention_factor) finite_pos("attention_factor", *r.attention_factor);
  if (r.mscale && !std::isfinite(*r.mscale))
    throw InputError(src + ": rope_scaling 'mscale' must be finite, got " + fmt_double(*r.mscale));
  if (r.mscale_all_dim && !std::isfinite(*r.mscale_all_dim))
    throw InputError(src + ": rope_scaling 'mscale_all_dim' must be finite, got " +
                     fmt_double(*r.mscale_all_dim));
}

// A dimension in [1, max]; the message names the field, its value and the limit.
void check_dim(const std::string& src, const char* name, int64_t v, int64_t max) {
  if (v <= 0)
    throw InputError(src + ": field '" + name + "' must be positive, got " + std::to_string(v));
  if (v > max)
    throw InputError(src + ": field '" + name + "' is " + std::to_string(v) +
                     ", above the limit of " + std::to_string(max) + " (docs/MODELS.md, Limits)");
}

// A finite number in (lo, hi) (NaN fails every comparison, so it is rejected too).
void check_open_range(const std::string& src, const char* name, double v, double lo, double hi,
                      const char* range) {
  if (!std::isfinite(v) || !(v > lo) || !(v < hi))
    throw InputError(src + ": field '" + name + "' must be a finite number " + range + ", got " +
                     fmt_double(v));
}

}  // namespace

void ModelConfig::validate(const std::string& src) const {
  // Each dimension on its own, before any product of them is formed.
  check_dim(src, "hidden_size", hidden_size, kMaxHiddenSize);
  check_dim(src, "intermediate_size", intermediate_size, kMaxIntermediateSize);
  check_dim(src, "num_hidden_layers", num_hidden_layers, kMaxLayers);
  check_dim(src, "num_attention_heads", num_attention_heads, kMaxHeads);
  check_dim(src, "num_key_value_heads", num_key_value_heads, kMaxHeads);
  check_dim(src, "head_dim", head_dim, kMaxHeadDim);
  check_dim(src, "vocab_size", vocab_size, kMaxVocabSize);
  check_dim(src, "max_position_embeddings", max_position_embeddings, kMaxPositionEmbeddings);
  if (num_attention_heads % num_key_value_heads != 0)
    throw InputError(src + ": num_attention_heads (" + std::to_string(num_attention_heads) +
                     ") must be a multiple of num_key_value_heads (" +
                     std::to_string(num_key_value_heads) + ")");
  if (head_dim % 2 != 0) throw InputError(src + ": head_dim must be even for rotary embeddings");
  // The projections' widths: bounded fields cannot overflow here, the limit keeps q_proj sane.
  const int64_t attn_width = checked_mul(num_attention_heads, head_dim, src + ": heads * head_dim");
  if (attn_width > kMaxAttentionWidth)
    throw InputError(src + ": num_attention_heads * head_dim (" + std::to_string(attn_width) +
                     ") is above the limit of " + std::to_string(kMaxAttentionWidth) +
                     " (docs/MODELS.md, Limits)");
  const int64_t params = num_parameters();  // checked
  if (params > kMaxParameters)
    throw InputError(src + ": the model has " + std::to_string(params) +
                     " parameters, above the limit of " + std::to_string(kMaxParameters) +
                     " (docs/MODELS.md, Limits)");
  // torch refuses a padding_idx outside [-V, V) when transformers builds the embedding.
  if (pad_token_id && (*pad_token_id < -vocab_size || *pad_token_id >= vocab_size))
    throw InputError(src + ": field 'pad_token_id' is " + std::to_string(*pad_token_id) +
                     ", outside the vocabulary [-" + std::to_string(vocab_size) + ", " +
                     std::to_string(vocab_size) + ") (it is the embedding's padding_idx)");
  check_open_range(src, "rms_norm_eps", rms_norm_eps, 0.0, 1.0, "in (0, 1)");
  // Hugging Face computes the rotary frequencies from theta in float32, so theta must be finite
  // there too; theta <= 1 would turn the frequencies upside down (or make them all 1).
  check_open_range(src, "rope_theta", rope_theta, 1.0, static_cast<double>(FLT_MAX),
                   "in (1, 3.4e38)");
  if (rope_scaling.type == RopeScalingType::yarn ||
      rope_scaling.type == RopeScalingType::dynamic)
    validate_scaled_rope(rope_scaling, src);
  if (rope_scaling.type == RopeScalingType::linear &&
      (!std::isfinite(rope_scaling.factor) || !(rope_scaling.factor > 0)))
    throw InputError(src + ": rope_scaling 'factor' must be positive and finite, got " +
                     fmt_double(rope_scaling.factor));
  if (gemma()) {
    check_open_range(src, "query_pre_attn_scalar", query_pre_attn_scalar, 0.0,
                     static_cast<double>(FLT_MAX), "> 0");
    check_dim(src, "sliding_window", sliding_window, kMaxPositionEmbeddings);
    check_open_range(src, "rope_local_base_freq", rope_local_base_freq, 1.0,
                     static_cast<double>(FLT_MAX), "in (1, 3.4e38)");
    if (static_cast<int64_t>(layer_sliding.size()) != num_hidden_layers)
      throw InputError(src + ": 'layer_types' has " + std::to_string(layer_sliding.size()) +
                       " entries for " + std::to_string(num_hidden_layers) + " layers");
    if (final_logit_softcapping != 0.0)
      check_open_range(src, "final_logit_softcapping", final_logit_softcapping, 0.0,
                       static_cast<double>(FLT_MAX), "> 0");
  } else if (final_logit_softcapping != 0.0 || query_pre_attn_scalar != 0.0) {
    throw InputError(src + ": logit soft-capping and query_pre_attn_scalar are Gemma 3 fields; " +
                     model_type_name(model_type) + " does not use them");
  } else if (sliding_window != 0 || !layer_sliding.empty()) {
    // Mistral, or Qwen2 / Qwen3 with use_sliding_window (the fields in config.h are Gemma's too).
    if (model_type != ModelType::qwen2 && model_type != ModelType::qwen3 &&
        model_type != ModelType::mistral)
      throw InputError(src + ": " + model_type_name(model_type) +
                       " has no sliding-window layers (Gemma 3, Mistral, Qwen2 and Qwen3 do)");
    check_dim(src, "sliding_window", sliding_window, kMaxPositionEmbeddings);
    if (static_cast<int64_t>(layer_sliding.size()) != num_hidden_layers)
      throw InputError(src + ": " + std::to_string(layer_sliding.size()) +
                       " sliding/full layer types for " + std::to_string(num_hidden_layers) +
                       " layers");
    // config.json can only say "every layer" for Mistral (sliding_window: w or null).
    if (model_type == ModelType::mistral &&
        std::find(layer_sliding.begin(), layer_sliding.end(), false) != layer_sliding.end())
      throw InputError(src + ": mistral slides every layer or none ('sliding_window' or null); "
                             "a full-attention layer among sliding ones is not a Mistral model");
  }
  // MistralAttention has no biases whatever the config says: honouring the field would look
  // for tensors the checkpoint does not have (and describe another model than transformers').
  if (model_type == ModelType::mistral && attention_bias)
    throw InputError(src + ": 'attention_bias': true is not a Mistral option (transformers' "
                           "MistralAttention has no biases)");
  if (rope_scaling.type == RopeScalingType::llama3) {
    // Values the llama3 formula cannot use (it divides by factor and by high - low).
    const RopeScaling& r = rope_scaling;
    if (!std::isfinite(r.factor) || !(r.factor > 0))
      throw InputError(src + ": rope_scaling 'factor' must be positive and finite, got " +
                       fmt_double(r.factor));
    if (!std::isfinite(r.high_freq_factor) || !(r.low_freq_factor > 0) ||
        !(r.high_freq_factor > r.low_freq_factor))
      throw InputError(src + ": rope_scaling needs 0 < 'low_freq_factor' < 'high_freq_factor'");
    if (r.original_max_position_embeddings <= 0 ||
        r.original_max_position_embeddings > kMaxPositionEmbeddings)
      throw InputError(src + ": rope_scaling 'original_max_position_embeddings' must be in [1, " +
                       std::to_string(kMaxPositionEmbeddings) + "], got " +
                       std::to_string(r.original_max_position_embeddings));
  }
}

json ModelConfig::to_json() const {
  json j = extra.is_object() ? extra : json::object();
  j["model_type"] = model_type_name(model_type);
  if (!j.contains("architectures"))
    j["architectures"] = json::array({std::string(model_class_prefix(model_type)) + "ForCausalLM"});
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (gemma()) {
    // transformers 5 spelling: one rope per layer type (read back by from_json above).
    json full = {{"rope_type", "default"}};
    if (rope_scaling.type != RopeScalingType::none) full = rope_json(rope_scaling);
    full["rope_theta"] = rope_theta;
    j["rope_parameters"] = {
        {"full_attention", full},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", rope_local_base_freq}}}};
    j["rope_local_base_freq"] = rope_local_base_freq;
    j.erase("rope_scaling");
    // transformers' Gemma3TextConfig declares it int and rejects 24.0 on load.
    const double qpas = query_pre_attn_scalar;
    j["query_pre_attn_scalar"] =
        std::floor(qpas) == qpas && qpas < 9e15 ? json(static_cast<int64_t>(qpas)) : json(qpas);
    j["sliding_window"] = sliding_window;
    json types = json::array();
    for (bool sl : layer_sliding) types.push_back(sl ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    j.erase("sliding_window_pattern");  // layer_types says it all (and wins in transformers)
    j["final_logit_softcapping"] =
        final_logit_softcapping > 0 ? json(final_logit_softcapping) : json(nullptr);
    j["attn_logit_softcapping"] = nullptr;
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["use_bidirectional_attention"] = false;
  } else {
    j["rope_scaling"] = rope_json(rope_scaling);
  }
  if (model_type == ModelType::mistral) {
    // MistralConfig's one window field: null is full attention (a missing key would be 4096).
    j["sliding_window"] = layer_sliding.empty() ? json(nullptr) : json(sliding_window);
  } else if (!gemma() && !layer_sliding.empty()) {  // Qwen2 / Qwen3 with a window
    j["use_sliding_window"] = true;
    j["sliding_window"] = sliding_window;
    json types = json::array();
    for (bool sl : layer_sliding) types.push_back(sl ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  } else if ((model_type == ModelType::qwen2 || model_type == ModelType::qwen3) &&
             j.contains("layer_types") && j["layer_types"].is_array()) {
    // No window: from_json accepted only full layers; one per layer, after a --layers override
    // too (transformers 5 writes layer_types for every Qwen2 config).
    j["layer_types"] = json::array();
    for (int64_t i = 0; i < num_hidden_layers; ++i) j["layer_types"].push_back("full_attention");
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  // Qwen2 has q/k/v biases and Mistral none, whatever the field says: neither config has it.
  if (model_type != ModelType::qwen2 && model_type != ModelType::mistral)
    j["attention_bias"] = attention_bias;
  j["torch_dtype"] = torch_dtype;
  j["pad_token_id"] = pad_token_id ? json(*pad_token_id) : json(nullptr);
  if (!gemma() && !j.contains("hidden_act")) j["hidden_act"] = "silu";
  return j;
}

int64_t ModelConfig::padding_row() const {
  if (!pad_token_id) return -1;
  return *pad_token_id < 0 ? vocab_size + *pad_token_id : *pad_token_id;
}

float ModelConfig::attention_scale() const {
  // transformers: query_pre_attn_scalar ** -0.5 (a Python float) for Gemma, head_dim ** -0.5
  // for the others; both reach the kernels as float32.
  if (gemma()) return static_cast<float>(1.0 / std::sqrt(query_pre_attn_scalar));
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

float ModelConfig::embed_scale() const {
  // transformers: torch.tensor(hidden_size ** 0.5), a float32 scalar.
  return gemma() ? static_cast<float>(std::sqrt(static_cast<double>(hidden_size))) : 1.0f;
}

float ModelConfig::embed_scale(bool bf16_activations) const {
  const float s = embed_scale();
  return bf16_activations ? bf16_to_f32(f32_to_bf16(s)) : s;
}

bool ModelConfig::layer_is_sliding(int64_t l) const {
  return l >= 0 && l < static_cast<int64_t>(layer_sliding.size()) &&
         layer_sliding[static_cast<size_t>(l)];
}

void ModelConfig::set_num_layers(int64_t L) {
  if (gemma() && L >= 0 && L <= kMaxLayers) {
    int64_t period = 0;  // 0: no full-attention layer
    for (size_t i = 0; i < layer_sliding.size() && period == 0; ++i)
      if (!layer_sliding[i]) period = static_cast<int64_t>(i) + 1;
    layer_sliding.resize(static_cast<size_t>(L));
    for (int64_t i = 0; i < L; ++i)
      layer_sliding[static_cast<size_t>(i)] = period == 0 || (i + 1) % period != 0;
  } else if (model_type == ModelType::mistral && !layer_sliding.empty() && L >= 0 &&
             L <= kMaxLayers) {
    layer_sliding.assign(static_cast<size_t>(L), true);  // every Mistral layer slides
  } else if (!layer_sliding.empty() && L >= 0 && L <= kMaxLayers) {
    // Qwen2 / Qwen3: the first L layer types; layers added past the end slide from
    // max_window_layers on, as transformers would derive them for a deeper model.
    const int64_t old = static_cast<int64_t>(layer_sliding.size());
    const int64_t first = max_window_layers(extra);
    layer_sliding.resize(static_cast<size_t>(L));
    for (int64_t i = old; i < L; ++i) layer_sliding[static_cast<size_t>(i)] = i >= first;
  }
  num_hidden_layers = L;
}

bool ModelConfig::has_sliding_layers() const {
  for (bool s : layer_sliding)
    if (s) return true;
  return false;
}

int64_t ModelConfig::num_parameters() const {
  // Checked throughout: called by validate() on dimensions that are each bounded, but also on
  // configs built in code; a count past int64 is an error naming the term.
  const int64_t d = hidden_size, h = head_dim, F = intermediate_size;
  const int64_t Hh = checked_mul(num_attention_heads, h, "num_attention_heads * head_dim");
  const int64_t Gh = checked_mul(num_key_value_heads, h, "num_key_value_heads * head_dim");
  auto mul = [](int64_t a, int64_t b) { return checked_mul(a, b, "the parameter count"); };
  auto add = [](int64_t a, int64_t b) { return checked_add(a, b, "the parameter count"); };
  int64_t per_layer = mul(2, d);                   // two norms
  per_layer = add(per_layer, mul(2, mul(d, Hh)));  // q, o
  per_layer = add(per_layer, mul(2, mul(d, Gh)));  // k, v
  per_layer = add(per_layer, mul(3, mul(d, F)));   // gate, up, down
  if (qkv_bias()) per_layer = add(per_layer, add(Hh, mul(2, Gh)));
  if (o_bias()) per_layer = add(per_layer, d);
  if (qk_norm()) per_layer = add(per_layer, mul(2, h));
  if (sandwich_norms()) per_layer = add(per_layer, mul(2, d));  // post-attention, post-MLP
  const int64_t embed = checked_mul(vocab_size, d, "vocab_size * hidden_size");
  int64_t n = add(add(mul(num_hidden_layers, per_layer), embed), d);  // layers, embedding, norm
  if (!tie_word_embeddings) n = add(n, embed);                        // lm_head
  return n;
}

namespace {

ModelConfig make(ModelType type, int64_t d, int64_t F, int64_t L, int64_t H, int64_t G, int64_t h,
                 int64_t V, bool tie, double theta, double eps, int64_t max_pos) {
  ModelConfig c;
  c.model_type = type;
  c.hidden_size = d;
  c.intermediate_size = F;
  c.num_hidden_layers = L;
  c.num_attention_heads = H;
  c.num_key_value_heads = G;
  c.head_dim = h;
  c.vocab_size = V;
  c.tie_word_embeddings = tie;
  c.rope_theta = theta;
  c.rms_norm_eps = eps;
  c.max_position_embeddings = max_pos;
  c.torch_dtype = "bfloat16";
  c.extra = json::object();
  return c;
}

ModelConfig llama3_scaled(ModelConfig c, double factor) {
  c.rope_scaling.type = RopeScalingType::llama3;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

ModelConfig gemma3(int64_t d, int64_t F, int64_t L, int64_t H, int64_t G, int64_t h, int64_t V,
                   int64_t window, double qpas, int64_t max_pos, double linear_factor) {
  ModelConfig c = make(ModelType::gemma3_text, d, F, L, H, G, h, V, true, 1e6, 1e-6, max_pos);
  c.pad_token_id = 0;  // <pad>, id 0 in every Gemma 3 tokenizer
  c.query_pre_attn_scalar = qpas;
  c.sliding_window = window;
  c.rope_local_base_freq = 1e4;
  for (int64_t i = 0; i < L; ++i) c.layer_sliding.push_back((i + 1) % 6 != 0);
  if (linear_factor != 1.0) {
    c.rope_scaling.type = RopeScalingType::linear;
    c.rope_scaling.factor = linear_factor;
  }
  return c;
}

// A Mistral config with every layer sliding by `window`.
ModelConfig mistral(ModelConfig c, int64_t window) {
  c.sliding_window = window;
  c.layer_sliding.assign(static_cast<size_t>(c.num_hidden_layers), true);
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  // Public config.json values of the released checkpoints (Hugging Face hub).
  static const std::map<std::string, ModelConfig> p = [] {
    std::map<std::string, ModelConfig> m;
    m["qwen3-0.6b"] =
        make(ModelType::qwen3, 1024, 3072, 28, 16, 8, 128, 151936, true, 1e6, 1e-6, 40960);
    m["qwen3-1.7b"] =
        make(ModelType::qwen3, 2048, 6144, 28, 16, 8, 128, 151936, true, 1e6, 1e-6, 40960);
    m["qwen3-4b"] =
        make(ModelType::qwen3, 2560, 9728, 36, 32, 8, 128, 151936, true, 1e6, 1e-6, 40960);
    m["qwen3-8b"] =
        make(ModelType::qwen3, 4096, 12288, 36, 32, 8, 128, 151936, false, 1e6, 1e-6, 40960);
    m["qwen3-14b"] =
        make(ModelType::qwen3, 5120, 17408, 40, 40, 8, 128, 151936, false, 1e6, 1e-6, 40960);
    m["qwen3-32b"] =
        make(ModelType::qwen3, 5120, 25600, 64, 64, 8, 128, 151936, false, 1e6, 1e-6, 40960);
    m["qwen2.5-0.5b"] =
        make(ModelType::qwen2, 896, 4864, 24, 14, 2, 64, 151936, true, 1e6, 1e-6, 32768);
    m["qwen2.5-7b"] =
        make(ModelType::qwen2, 3584, 18944, 28, 28, 4, 128, 152064, false, 1e6, 1e-6, 32768);
    m["qwen2.5-72b"] =
        make(ModelType::qwen2, 8192, 29568, 80, 64, 8, 128, 152064, false, 1e6, 1e-6, 32768);
    m["llama3.1-70b"] = llama3_scaled(
        make(ModelType::llama, 8192, 28672, 80, 64, 8, 128, 128256, false, 5e5, 1e-5, 131072), 8.0);
    m["llama3.1-8b"] = llama3_scaled(
        make(ModelType::llama, 4096, 14336, 32, 32, 8, 128, 128256, false, 5e5, 1e-5, 131072), 8.0);
    m["llama3.2-1b"] = llama3_scaled(
        make(ModelType::llama, 2048, 8192, 16, 32, 8, 64, 128256, true, 5e5, 1e-5, 131072), 32.0);
    // Gemma 3 text models (Gemma3ForCausalLM / the text_config of the multimodal ones): every
    // sixth layer full attention, the others a sliding window; 4b and up scale the
    // full-attention rope linearly by 8 (128K context).
    m["gemma3-1b"] = gemma3(1152, 6912, 26, 4, 1, 256, 262144, 512, 256, 32768, 1.0);
    m["gemma3-4b"] = gemma3(2560, 10240, 34, 8, 4, 256, 262208, 1024, 256, 131072, 8.0);
    m["gemma3-12b"] = gemma3(3840, 15360, 48, 16, 8, 256, 262208, 1024, 256, 131072, 8.0);
    m["gemma3-27b"] = gemma3(5376, 21504, 62, 32, 16, 128, 262208, 1024, 168, 131072, 8.0);
    // Mistral 7B: v0.1 slides every layer with a window of 4096; v0.2 / v0.3 dropped the window
    // (sliding_window: null) and raised rope_theta; v0.3 extended the vocabulary.
    m["mistral-7b-v0.1"] =
        mistral(make(ModelType::mistral, 4096, 14336, 32, 32, 8, 128, 32000, false, 1e4, 1e-5,
                     32768),
                4096);
    m["mistral-7b-v0.3"] =
        make(ModelType::mistral, 4096, 14336, 32, 32, 8, 128, 32768, false, 1e6, 1e-5, 32768);
    // Tiny shapes for tests and demos (not released models).
    m["tiny-qwen3"] = make(ModelType::qwen3, 64, 160, 2, 4, 2, 24, 97, false, 1e4, 1e-6, 4096);
    m["tiny-qwen2"] = make(ModelType::qwen2, 48, 112, 2, 6, 2, 8, 89, true, 1e4, 1e-6, 4096);
    ModelConfig tl = llama3_scaled(
        make(ModelType::llama, 64, 128, 2, 4, 4, 16, 101, false, 5e5, 1e-5, 4096), 8.0);
    tl.rope_scaling.original_max_position_embeddings = 64;  // so the scaling bands matter
    m["tiny-llama"] = tl;
    // Window 5 below the test lengths, pattern 2 (sliding, full), linear rope on the full
    // layers, soft-capped logits, GQA: every Gemma 3 path of the engine.
    ModelConfig tg = gemma3(48, 96, 2, 4, 2, 16, 83, 5, 24, 4096, 4.0);
    tg.layer_sliding = {true, false};
    tg.final_logit_softcapping = 5.0;
    m["tiny-gemma3"] = tg;
    // Every layer a window of 5 (below the test lengths), GQA, untied head: Mistral's path.
    m["tiny-mistral"] =
        mistral(make(ModelType::mistral, 48, 112, 2, 4, 2, 12, 79, false, 1e4, 1e-5, 4096), 5);
    for (auto& [name, c] : m) {
      if (name.starts_with("tiny-")) c.torch_dtype = "float32";
    }
    return m;
  }();
  return p;
}

}  // namespace

bool has_preset(const std::string& name) { return presets().count(name) != 0; }

ModelConfig preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw InputError("unknown model preset '" + name + "' (known: " + list + ")");
  }
  return it->second;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [n, c] : presets()) names.push_back(n);
  return names;
}

ModelConfig resolve_config(const std::string& arg) {
  namespace fs = std::filesystem;
  if (fs::is_directory(arg)) {
    const fs::path cfg = fs::path(arg) / "config.json";
    if (!fs::exists(cfg)) throw InputError(arg + ": directory has no config.json");
    return ModelConfig::from_file(cfg.string());
  }
  if (fs::is_regular_file(arg)) return ModelConfig::from_file(arg);
  if (has_preset(arg)) return preset_config(arg);
  throw InputError("model '" + arg +
                   "' is neither a model directory, a config.json, nor a known preset");
}

}  // namespace sbp
