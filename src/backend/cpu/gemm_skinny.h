#pragma once
// C = alpha * A B^T + beta * C for a few rows of A: the projections of a decoding step (one new
// row per sequence, generate.cpp) against a weight B stored (N, K) row-major, as every layer
// and the LM head store theirs. sgemm packs B into panels on every call, which at M = 1..16 is
// most of the call's time (the packed copy is written and read again: about three passes over
// the weights where one suffices); here each row of B is read once, from memory, and dotted
// with all M rows of A (held in cache). Bandwidth-bound, like the decoding step itself.
#include <cstdint>

#include "core/tensor.h"

namespace sbp::cpu {

// Largest M that takes the skinny path (A's rows, 16 x K floats, stay in L2 for K <= 8192).
inline constexpr int64_t kSkinnyMaxRows = 16;

// True when (C, A, trans_a, B, trans_b) is an all-F32 C (M, N) = A (M, K) B^T with
// M <= kSkinnyMaxRows: the case gemm_skinny_nt computes.
bool skinny_applies(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b);

// C (M, N) = alpha * A (M, K) B^T + beta * C, B (N, K); F32, row-major. beta == 0 overwrites C
// (NaN in C does not propagate). Each element is one fp32 dot product over K, summed in a
// fixed order (the same bits for the same element at any M and any thread count).
void gemm_skinny_nt(const Tensor& C, const Tensor& A, const Tensor& B, float alpha, float beta);

}  // namespace sbp::cpu
