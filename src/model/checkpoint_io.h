#pragma once
// Hugging Face model directories: config.json + model.safetensors, or sharded
// model-0000i-of-0000n.safetensors with model.safetensors.index.json.
#include <string>

#include "model/config.h"
#include "model/parameters.h"

namespace sbp {

// Loads every parameter of `params` (layout from `cfg`) from the directory `dir`, converting
// to the parameters' dtype. Validates: every expected tensor present exactly once, shapes equal
// to those implied by config.json, no unknown tensor names (a tied checkpoint may carry an
// `lm_head.weight` only if it equals the embedding), index files naming existing shards.
// Errors name the file and the tensor.
void load_weights(const std::string& dir, const ModelConfig& cfg, ParameterSet& params);

// Writes config.json + model.safetensors (weights in `dtype`) into `dir`, atomically: into a
// temporary sibling directory that is renamed over `dir` at the end. `max_shard_bytes` > 0
// splits the weights into shards with an index file, as save_pretrained does.
void save_model_dir(const std::string& dir, const ModelConfig& cfg, const ParameterSet& params,
                    DType dtype, int64_t max_shard_bytes = 0);

// Reads config.json of a model directory (a directory or a config file path).
ModelConfig load_config(const std::string& dir_or_file);

}  // namespace sbp
