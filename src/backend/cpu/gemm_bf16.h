#pragma once
// GEMM with BF16 operands (any of A, B, C), fp32 arithmetic: see gemm_bf16.cpp.
#include "core/tensor.h"

namespace sbp::cpu {

// C (M, N) = alpha * op(A) op(B) + beta * C, as Backend::gemm, for a call where at least one of
// A, B, C is BF16 (and the others F32) and M, N, K > 0. BF16 panels are widened to fp32 in
// bounded scratch and multiplied with OpenBLAS sgemm; a BF16 C is accumulated in an fp32 tile
// and rounded once per call.
void gemm_mixed(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                float alpha, float beta);

}  // namespace sbp::cpu
