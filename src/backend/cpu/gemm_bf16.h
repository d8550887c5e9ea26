#pragma once
// GEMM with BF16 operands (any of A, B, C), fp32 arithmetic: see gemm_bf16.cpp.
#include "core/tensor.h"

namespace sbp::cpu {

// C (M, N) = alpha * op(A) op(B) + beta * C, as Backend::gemm, for a call where at least one of
// A, B, C is BF16 (and the others F32) and M, N, K > 0. Where A or B is BF16 and the CPU has
// AVX-512 BF16 (bf16_dot_choice()), the product runs on bf16 dot products (gemm_bf16_dot.h).
// Otherwise BF16 panels are widened to fp32 in bounded scratch and multiplied with OpenBLAS
// sgemm. Either way a BF16 C is accumulated in fp32 and rounded once per call.
void gemm_mixed(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                float alpha, float beta);

}  // namespace sbp::cpu
