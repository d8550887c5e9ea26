#pragma once
// Which conversions a GEMM needs before cuBLASLt can run it (plain C++, tested on the CPU in
// tests/backend/cuda_math_test.cpp).
//
// cuBLASLt with fp32 compute (CUBLAS_COMPUTE_32F, no TF32) takes A and B of one type: both F32
// with an F32 C, or both BF16 with a BF16 or F32 C. The contract allows any mix, so:
//  - A and B of different types: the BF16 one is widened to F32 (exact), then both are F32;
//  - A and B F32 with a BF16 C: C is widened to F32 (exact), the product is accumulated there
//    and rounded back once (beta * C + alpha * AB in fp32, one rounding, as the contract asks).
// Nothing is ever narrowed before the product: narrowing an F32 operand would lose bits.
#include <cstdint>

#include "core/dtype.h"

namespace sbp::cuda {

struct GemmPlan {
  bool widen_a = false;  // A BF16 -> F32 scratch
  bool widen_b = false;
  bool widen_c = false;  // C BF16 -> F32 scratch, product there, rounded back into C
  bool operands_bf16 = false;  // cuBLASLt's A/B type after the widening
};

inline GemmPlan plan_gemm(DType a, DType b, DType c) {
  GemmPlan p;
  if (a != b) {
    p.widen_a = a == DType::BF16;
    p.widen_b = b == DType::BF16;
  }
  p.operands_bf16 = a == DType::BF16 && b == DType::BF16;
  p.widen_c = !p.operands_bf16 && c == DType::BF16;
  return p;
}

// A row-major product C (M, N) = op(A) op(B) as cuBLASLt's column-major one. A row-major (r, c)
// matrix with leading dimension ld is the column-major (c, r) matrix of its transpose, so
// C^T = op(B)^T op(A)^T: cuBLASLt's first operand is B's memory, its second A's, m = N, n = M.
struct LtLayout {
  int64_t rows, cols, ld;  // column-major, as stored
};
struct LtProblem {
  bool trans1, trans2;      // cuBLASLt's op on its first (B's memory) and second (A's) operand
  LtLayout first, second, c;
  int64_t m, n, k;
};
inline LtProblem lt_problem(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            int64_t lda, int64_t ldb, int64_t ldc) {
  LtProblem p;
  p.trans1 = trans_b;
  p.trans2 = trans_a;
  // B is stored (K, N) row-major, or (N, K) when transposed: column-major (N, K) or (K, N).
  p.first = trans_b ? LtLayout{K, N, ldb} : LtLayout{N, K, ldb};
  p.second = trans_a ? LtLayout{M, K, lda} : LtLayout{K, M, lda};
  p.c = LtLayout{N, M, ldc};
  p.m = N;
  p.n = M;
  p.k = K;
  return p;
}

// The largest power of two (at most 256) dividing the address: cuBLASLt's heuristic must only
// offer kernels that accept the alignment of views cut at arbitrary rows.
inline unsigned alignment_of(const void* p) {
  const auto a = reinterpret_cast<unsigned long long>(p);
  unsigned al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

}  // namespace sbp::cuda
