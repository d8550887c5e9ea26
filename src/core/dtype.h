#pragma once
// Storage dtypes. The CPU backend computes in fp32; bf16/f16 exist for reading and
// writing checkpoints and for the shape-only planner, which must count real bytes.
#include <cstdint>
#include <cstring>
#include <string>

#include "core/enum_names.h"

namespace sbp {

enum class DType : uint8_t { F32, BF16, F16, I32 };

// Every spelling of a dtype, in one table: safetensors' ("F32"), a Hugging Face config's
// torch_dtype ("float32"), and ours on the command line and in train configs ("f32").
struct DTypeNames {
  DType dtype;
  const char* safetensors;
  const char* torch;
  const char* flag;
};
inline constexpr DTypeNames kDTypeNames[] = {{DType::F32, "F32", "float32", "f32"},
                                             {DType::BF16, "BF16", "bfloat16", "bf16"},
                                             {DType::F16, "F16", "float16", "f16"},
                                             {DType::I32, "I32", "int32", "i32"}};
// The dtypes weights are written in (save_dtype, init/merge --dtype), and gradient buffers take
// (grad_dtype, plan --grad-dtype), as flags spell them.
inline constexpr EnumName<DType> kWeightDTypeNames[] = {
    {DType::F32, "f32"}, {DType::BF16, "bf16"}, {DType::F16, "f16"}};
inline constexpr EnumName<DType> kGradDTypeNames[] = {{DType::F32, "f32"}, {DType::BF16, "bf16"}};

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);        // safetensors spelling: "F32", "BF16", "F16", "I32"
const char* torch_dtype_name(DType dt);  // config.json's torch_dtype: "float32", "bfloat16", ...
// Parses any spelling of the table ("F32", "float32", "f32", and "fp32" / "fp16").
// Returns false for anything unknown.
bool parse_dtype(const std::string& s, DType* out);

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// The precision of a run (DESIGN §5 "Precision"): fp32 everywhere, or bf16 weights, activations,
// layer-input checkpoints and head blocks with fp32 accumulation, fp32 master weights and AdamW
// moments, fp32 dK/dV accumulators, loss, lse and log-probs.
enum class Precision { fp32, bf16 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}, {Precision::fp32, "f32", true}};
// The storage of weights and activations at a precision: F32 or BF16.
inline DType storage_dtype(Precision p) { return p == Precision::bf16 ? DType::BF16 : DType::F32; }

}  // namespace sbp
