#pragma once
// Hugging Face model directories: config.json + model.safetensors, or sharded
// model-0000i-of-0000n.safetensors with model.safetensors.index.json.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "model/safetensors.h"

namespace sbp {

// Loads every parameter of `params` (layout from `cfg`) from the directory `dir`, converting
// to the parameters' dtype. Validates: every expected tensor present exactly once, shapes equal
// to those implied by config.json, no unknown tensor names (a tied checkpoint may carry an
// `lm_head.weight` only if it equals the embedding), index files naming existing shards.
// Errors name the file and the tensor.
void load_weights(const std::string& dir, const ModelConfig& cfg, ParameterSet& params);

// The safetensors files of a model directory (model.safetensors, or model.safetensors.index.json
// and its shards), opened and cross-checked as load_weights reads them: shard names plain file
// names, every tensor stored once, the index and the shards agreeing both ways.
struct ModelFiles {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;  // tensor name -> the file holding it
  std::string source;  // the file that lists the tensors: model.safetensors or the index
};
ModelFiles open_model_files(const std::string& dir);

// Tensors transformers ignores on load (rotary tables older Llama checkpoints carry as buffers).
bool ignorable_tensor(const std::string& name);

// Every element of tensor `name` of `file` (numel elements) is finite, or InputError naming the
// file, the tensor and the element: a NaN or inf weight makes every loss NaN. Read from the file
// in bounded pieces; load_weights and the value model's loader call it before copying anything.
void check_weights_finite(const SafetensorsFile& file, const std::string& name, int64_t numel);

// The files beside the weights that transformers reads with a model directory: the tokenizer's
// (AutoTokenizer.from_pretrained) and generation_config.json (generate's defaults: eos ids,
// sampling settings). A directory that `merge` or a training checkpoint writes carries them, so
// that it loads, tokenizes and generates like its base.
inline constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "added_tokens.json",     "chat_template.jinja",     "tokenizer.model"};
inline constexpr const char* kGenerationConfigFile = "generation_config.json";

// The companion files that exist: every kTokenizerFiles entry of `tokenizer_dir`, then
// kGenerationConfigFile of `model_dir` (an empty directory name: nothing from it).
std::vector<std::string> companion_files(const std::string& tokenizer_dir,
                                         const std::string& model_dir);
// True for the names save_model_dir writes into a model directory: config.json,
// model.safetensors, model-<i>-of-<n>.safetensors, model.safetensors.index.json,
// generation_config.json and kTokenizerFiles. A directory holding anything else is not
// save_model_dir's to replace (core/output_paths.h's first_foreign_file).
bool is_model_dir_file(const std::string& name);

// True if `dir` holds a tokenizer (tokenizer.json, or tokenizer_config.json with vocab files).
bool has_tokenizer_files(const std::string& dir);

// Writes config.json + model.safetensors (weights in `dtype`) into `dir`, atomically: into a
// temporary sibling directory that is renamed over `dir` at the end. An existing `dir` is
// replaced only if it is empty or every file in it is_model_dir_file() (InputError naming the
// first other file). `max_shard_bytes` > 0
// splits the weights into shards with an index file, as save_pretrained does. `companions`
// (companion_files()) are copied in under their file names before the rename, so the directory
// is complete whenever it exists. `generated` files (a name is_model_dir_file() accepts and its
// text: a converted tokenizer) are written in the same way.
struct GeneratedFile {
  std::string name;
  std::string text;
};
void save_model_dir(const std::string& dir, const ModelConfig& cfg, const ParameterSet& params,
                    DType dtype, int64_t max_shard_bytes = 0,
                    const std::vector<std::string>& companions = {},
                    const std::vector<GeneratedFile>& generated = {});

// Reads config.json of a model directory (a directory or a config file path).
ModelConfig load_config(const std::string& dir_or_file);

}  // namespace sbp
