#pragma once
// `streambp convert`: a GGUF file to a Hugging Face model directory, and back.
#include <string>

#include "core/dtype.h"
#include "core/enum_names.h"
#include "model/gguf_quant.h"

namespace sbp {

// Reads and validates `gguf_path`, dequantizes every tensor to fp32 (bit-exact with the gguf
// package), undoes llama.cpp's conventions (q/k row order, Gemma's 1 + w norms) and writes
// config.json + model.safetensors (weights in `dtype`) + tokenizer.json + tokenizer_config.json
// into `out_dir`, atomically (model/checkpoint_io.h's save_model_dir). Returns a one-line summary.
std::string convert_gguf_to_hf(const std::string& gguf_path, const std::string& out_dir,
                               DType dtype);

// Writes the model directory `dir` (config.json + safetensors + tokenizer files) as one GGUF
// file: matrices in `type` (one of kGgufOutputTypeNames; Q8_0 falls back to F16 for rows that
// are not a multiple of 32), vectors (norms, biases) in F32, as llama.cpp's converter stores them.
std::string convert_hf_to_gguf(const std::string& dir, const std::string& out_path, GgmlType type);

// The matrix types convert_hf_to_gguf writes, spelled as `streambp convert --type` takes them.
inline constexpr EnumName<GgmlType> kGgufOutputTypeNames[] = {{GgmlType::F32, "f32"},
                                                              {GgmlType::F16, "f16"},
                                                              {GgmlType::BF16, "bf16"},
                                                              {GgmlType::Q8_0, "q8_0"}};

}  // namespace sbp
