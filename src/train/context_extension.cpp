#include "train/context_extension.h"

#include "core/error.h"

namespace sbp {

ModelConfig extend_context(const ModelConfig& cfg, const ContextExtension& e,
                           const std::string& where) {
  if (!e.active()) return cfg;
  // Through config.json's own spelling, so the result is exactly what from_json reads back
  // from the checkpoint (and validated by the same code).
  nlohmann::json j = cfg.to_json();
  if (e.max_position_embeddings > 0) j["max_position_embeddings"] = e.max_position_embeddings;
  if (e.set_rope) {
    if (!e.rope_scaling.is_null() && !e.rope_scaling.is_object())
      throw InputError(where + ": context.rope_scaling must be a mapping (or none)");
    if (cfg.gemma()) {
      // Gemma 3 writes one rope per layer type: the scaling is its full-attention layers'.
      nlohmann::json full =
          e.rope_scaling.is_null() ? nlohmann::json{{"rope_type", "default"}} : e.rope_scaling;
      full["rope_theta"] = cfg.rope_theta;
      j["rope_parameters"]["full_attention"] = full;
    } else {
      j["rope_scaling"] = e.rope_scaling;
    }
    // A rope's original positions at the top level would override the new scaling's.
    j.erase("original_max_position_embeddings");
  }
  try {
    ModelConfig out = ModelConfig::from_json(j, "context.rope_scaling / max_position_embeddings");
    out.torch_dtype = cfg.torch_dtype;
    return out;
  } catch (const InputError& err) {
    throw InputError(where + ": " + err.what());
  }
}

}  // namespace sbp
