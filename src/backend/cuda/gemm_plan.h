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

// The largest power of two (at most 256) dividing the address: cuBLASLt's heuristic must only
// offer kernels that accept the alignment of views cut at arbitrary rows.
inline unsigned alignment_of(const void* p) {
  const auto a = reinterpret_cast<unsigned long long>(p);
  unsigned al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

}  // namespace sbp::cuda
