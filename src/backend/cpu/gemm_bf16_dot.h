#pragma once
// GEMM on bf16 dot products (AVX-512 BF16, vdpbf16ps) with fp32 accumulation: gemm_bf16_dot.cpp.
// gemm_bf16.cpp's gemm_mixed sends a call here when the CPU has the instructions and at least
// one of A, B is BF16; everything else keeps the widened-sgemm path.
#include <cstdint>

#include "core/tensor.h"

namespace sbp::cpu {

// How an F32 operand beside a BF16 one enters the bf16 products: rounded to bf16 (1 part, what
// PyTorch's autocast does to a gradient), or split into 2 or 3 bf16 parts whose sum is the fp32
// value to 16 or all 24 bits (the CUDA backend's rule, gemm_scratch.h), each part one more pass
// over the inner dimension (an infinite value has no parts: it becomes NaN there).
struct Bf16DotChoice {
  bool use = false;  // false: the CPU lacks AVX-512 BF16, or STREAMBP_GEMM_BF16=widen
  int parts = 1;     // 1, 2 or 3
};

// Decided once per process from the CPU (avx512f, avx512bw, avx512vl, avx512bf16) and
// STREAMBP_GEMM_BF16: unset or "dot" = rounded (1 part) where the CPU can, "dot2" / "dot3" =
// split into 2 / 3 parts where the CPU can, "widen" = the widened-sgemm path everywhere.
Bf16DotChoice bf16_dot_choice();

// "dot", "dot2", "dot3" or "widen": what bf16_dot_choice() chose (for bench and the tests).
const char* gemm_bf16_isa();

// True when this CPU can run gemm_bf16_dot (whatever STREAMBP_GEMM_BF16 says).
bool cpu_has_bf16_dot();

// C (M, N) = alpha * op(A) op(B) + beta * C for a call where A or B is BF16 (any of A, B, C may
// be F32), M, N, K > 0, on a CPU where cpu_has_bf16_dot(). Every product term is a bf16 x bf16
// product (exact in fp32); an F32 operand is rounded or split into `parts` bf16 parts; sums are
// fp32 over the inner dimension in blocks of a fixed length, added to C in fp32; a BF16 C is
// rounded once per call. beta == 0 does not read C. The order of every sum depends on K only
// (not on M, N, the thread count or an element's position), so a row computes the same bits in
// a product of any row count.
void gemm_bf16_dot(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                   float alpha, float beta, int parts);

}  // namespace sbp::cpu
