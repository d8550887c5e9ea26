#pragma once
// Value models for PPO: the trunk of a decoder (embeddings, layers, final norm) with a d -> 1
// head "score.weight" (1, d) instead of the LM head, the layout of TRL's value models
// (AutoModelForSequenceClassification with num_labels = 1, e.g. Qwen3ForSequenceClassification:
// `model.*` + `score.weight`, no bias). The value of row t is score . rmsnorm(y_L[t]); it is
// trained by the same streamed engine (Engine::forward_backward with a value objective, e.g.
// PpoValueObjective) and read by Engine::values.
#include <string>

#include "core/pool.h"
#include "model/config.h"
#include "model/parameters.h"

namespace sbp {

// Allocates a value model's parameters (ModelHead::value).
ParameterSet make_value_parameters(const ModelConfig& cfg, Pool& pool, Category category,
                                   DType dtype, bool zero);

// Loads a value model from a Hugging Face directory (model.safetensors, or shards with
// model.safetensors.index.json). Every trunk tensor must be present with the shape config.json
// implies. score.weight must be present too, unless `init_missing_head`: then a causal-LM
// checkpoint (its lm_head.weight ignored) gives the trunk and the head is drawn
// normal(0, head_std) from `seed` (how a value model is often started from the policy).
// Throws InputError naming the file and the tensor.
void load_value_weights(const std::string& dir, const ModelConfig& cfg, ParameterSet& params,
                        bool init_missing_head = false, uint64_t seed = 0, float head_std = 0.02f);

// The checks of load_value_weights without reading any weights (only the safetensors headers):
// lets a program reject a bad value checkpoint before it allocates or prints anything.
void check_value_weights(const std::string& dir, const ModelConfig& cfg,
                         bool init_missing_head = false);

}  // namespace sbp
