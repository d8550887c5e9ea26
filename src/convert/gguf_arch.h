#pragma once
// The one table between Hugging Face decoder checkpoints and llama.cpp's GGUF conventions, for the
// families both sides know: llama (and Mistral, which llama.cpp stores as llama), qwen2, qwen3,
// gemma3. What differs by family lives in GgufArch; the rest of the converter reads it.
//
//   HF                                        GGUF
//   model.embed_tokens.weight                 token_embd.weight
//   model.norm.weight                         output_norm.weight
//   lm_head.weight                            output.weight (absent when tied)
//   model.layers.N.input_layernorm            blk.N.attn_norm
//   model.layers.N.self_attn.{q,k,v,o}_proj   blk.N.attn_{q,k,v,output}   (.weight, .bias)
//   model.layers.N.self_attn.{q,k}_norm       blk.N.attn_{q,k}_norm
//   model.layers.N.post_attention_layernorm   blk.N.ffn_norm (Gemma: blk.N.post_attention_norm)
//   model.layers.N.pre_feedforward_layernorm  blk.N.ffn_norm (Gemma)
//   model.layers.N.post_feedforward_layernorm blk.N.post_ffw_norm (Gemma)
//   model.layers.N.mlp.{gate,up,down}_proj    blk.N.ffn_{gate,up,down}
//
// In code both sides are spelled from a parameter's typed identity (model/parameter_id.h): the
// GGUF column is gguf_arch.cpp's table by role, the HF column parameter_id.cpp's.
//
// Two value conventions differ:
//  - llama: llama.cpp's converter permutes the rows of q_proj and k_proj (weight and bias) within
//    each head from HF's rotate-half order (first half, second half) to interleaved pairs, since
//    its llama rope rotates adjacent pairs. Row (head, s, i) of HF (s in {0,1}, i < h/2) is row
//    (head, i, s) in GGUF. Qwen and Gemma use llama.cpp's NEOX rope and are stored unpermuted.
//  - gemma3: norm weights are stored as 1 + w (llama.cpp multiplies by the stored weight).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gguf_file.h"
#include "model/parameter_id.h"

namespace sbp {

struct GgufArch {
  const char* name;      // general.architecture
  ModelType type;        // the model_type it imports as (llama may become mistral, below)
  bool permute_qk;       // llama's interleaved q/k rows
  bool norm_plus_one;    // Gemma's stored 1 + w
};

// The family of general.architecture, or InputError naming the file and the value.
const GgufArch& gguf_arch_by_name(const std::string& arch, const std::string& source);
// The GGUF family a config exports as (Mistral: llama).
const GgufArch& gguf_arch_for(const ModelType t);

// config.json (as JSON, then validated by ModelConfig) from a GGUF file's <arch>.* metadata and
// tensor shapes. Extra keys (bos/eos ids) are added by the caller.
nlohmann::json gguf_to_config_json(const GgufFile& f, const GgufArch& arch);

// <arch>.* and general.* metadata of a config, in the order llama.cpp writes them.
std::vector<std::pair<std::string, GgufValue>> config_to_gguf_metadata(const ModelConfig& cfg);

// The GGUF tensor name of a parameter (nullopt: none, e.g. a value model's score), and the
// inverse (nullopt: not a tensor name of this table). One table each way (gguf_arch.cpp).
std::optional<std::string> gguf_name(const ParamId& id);
std::optional<ParamId> parse_gguf_name(const std::string& name);
// gguf_name, or InputError naming the parameter by its Hugging Face name.
std::string gguf_tensor_name(const ModelConfig& cfg, const ParamId& id);

// Row permutation of llama's q/k: values (rows = heads * h, cols) in place, HF order to GGUF
// order (to_gguf) or back.
void permute_qk_rows(float* values, int64_t heads, int64_t head_dim, int64_t cols, bool to_gguf);

// True for the parameters whose rows llama.cpp permutes (q_proj / k_proj weight and bias), with
// the number of heads of that projection in *heads.
bool is_permuted_qk(const ModelConfig& cfg, const ParamId& id, int64_t* heads);

bool is_norm_weight(const ParamId& id);

// llama3 rope scaling as llama.cpp stores it (tensor rope_freqs.weight, head_dim / 2 values):
// per frequency, the unscaled inverse frequency divided by the scaled one.
std::vector<float> llama3_rope_factors(const ModelConfig& cfg);

}  // namespace sbp
