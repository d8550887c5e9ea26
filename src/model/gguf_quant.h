#pragma once
// GGML tensor types as GGUF files store them, and their conversion to and from fp32.
// The block layouts and the arithmetic follow the `gguf` Python package's quants.py (which
// matches ggml's reference C code): dequantize() here equals gguf.quants.dequantize() to the
// bit, and quantize() equals gguf.quants.quantize() for F16, BF16 and Q8_0 (checked against
// committed fixtures in tests/model/gguf_quant_test.cpp).
//
// A row of a quantized tensor is a sequence of blocks: `block_elems` values stored in
// `block_bytes` bytes. ne0 (the row length, HF's last dimension) must be a multiple of
// block_elems.
#include <cstdint>
#include <optional>
#include <string>

namespace sbp {

// ggml_type numbers (ggml.h); only the ones we read or name.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeInfo {
  const char* name;     // "Q4_K", as gguf.GGMLQuantizationType names it
  int64_t block_elems;  // values per block
  int64_t block_bytes;  // bytes per block
  bool readable;        // dequantize() supports it
};

// The type's size and name, or nullopt for a number ggml does not define.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t type);
std::string ggml_type_name(uint32_t type);  // "Q4_K", or "type 77" for an unknown number

// Converts n values (n a multiple of the type's block_elems) stored at src into fp32 at dst.
// The type must be readable (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K).
void dequantize(GgmlType type, const unsigned char* src, float* dst, int64_t n);

// Converts n fp32 values into the type's blocks at dst (n a multiple of block_elems).
// Supported: F32, F16, BF16, Q8_0.
void quantize(GgmlType type, const float* src, unsigned char* dst, int64_t n);

// Export refuses what the target type cannot represent (no silent clamping or inf): the index
// of the first of x[0, n) that `type` cannot hold, or -1. F16: a finite value that rounds to inf
// (|x| >= 65520); BF16: one that rounds past the largest bf16; Q8_0: the largest value of the
// first block whose scale (max |x| / 127, stored as f16) would be inf, which turns the whole
// block into inf and NaN. F32 holds every float. Non-finite inputs are the caller's to refuse.
int64_t first_unrepresentable(GgmlType type, const float* x, int64_t n);

}  // namespace sbp
