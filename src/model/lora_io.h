#pragma once
// PEFT adapter directories, both ways:
//   adapter_config.json          peft_type LORA, r, lora_alpha, lora_dropout, target_modules,
//                                use_rslora, ... (PEFT's LoraConfig.to_dict() fields we use)
//   adapter_model.safetensors    "base_model.model.model.layers.{l}.self_attn.q_proj.lora_A.weight"
//                                (r, in) and "...lora_B.weight" (out, r), F32
// so that peft.PeftModel.from_pretrained(base, dir) loads what we save and we load what PEFT
// saves. PEFT features this engine does not implement (bias, DoRA, modules_to_save, rank or
// alpha patterns, layer subsets, fan_in_fan_out) are refused with an error naming the field.
#include <string>

#include "backend/backend.h"
#include "model/config.h"
#include "model/lora.h"

namespace sbp {

// The adapter configuration of `dir`/adapter_config.json (validated).
LoraConfig read_lora_config(const std::string& dir);

// Loads `dir`/adapter_model.safetensors into `lora` (shaped by read_lora_config and the base
// model's config): every tensor must be present with its shape, and nothing else.
void load_lora_weights(const std::string& dir, const LoraSet& lora);

// Writes adapter_config.json and adapter_model.safetensors into `dir` (created if needed; each
// file replaced atomically). `base_model` goes to base_model_name_or_path.
void save_lora_adapter(const std::string& dir, const LoraSet& lora, const std::string& base_model);

}  // namespace sbp
