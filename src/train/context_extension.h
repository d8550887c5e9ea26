#pragma once
// Context extension for a training run (issue 52; docs/TRAINING.md "Context extension"): the
// keys context.rope_scaling and context.max_position_embeddings replace the starting model's
// rope scaling and position count. The run computes with the result and every checkpoint's
// config.json carries it, so transformers loads the trained model with the rope it was trained
// with.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace sbp {

struct ContextExtension {
  // The rope_scaling object to put in the model's config.json (transformers' spelling, e.g.
  // {rope_type: yarn, factor: 4, original_max_position_embeddings: 8192}); null with
  // `set_rope`: back to the default rope; unset: the model's own.
  nlohmann::json rope_scaling;
  bool set_rope = false;
  int64_t max_position_embeddings = 0;  // 0: the model's own
  bool active() const { return set_rope || max_position_embeddings > 0; }
};

// cfg with the extension applied, validated as a config.json would be: a bad field is an
// InputError naming `where` (the YAML file and key) and the field.
ModelConfig extend_context(const ModelConfig& cfg, const ContextExtension& e,
                           const std::string& where);

}  // namespace sbp
