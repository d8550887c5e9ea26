#pragma once
// How one gemm call runs on cuBLASLt (plain C++, tested on the CPU in
// tests/backend/cuda_gemm_plan_test.cpp and tests/backend/cuda_math_test.cpp).
//
// Every product of a bf16 step runs on the bf16 tensor cores: cuBLASLt with CUBLAS_COMPUTE_32F
// and BF16 A and B (fp32 accumulation, an F32 or BF16 C). The contract allows any mix, so:
//  - A and B BF16: one call, C as it is (a BF16 C is rounded once by cuBLASLt);
//  - one of A, B F32 (the activation gradient of a bf16 step beside a BF16 weight or
//    activation): the F32 operand is split into kGemmSplitParts bf16 parts (gemm_split.h) and
//    the product runs as one call per part into C, lo part first, beta on the first call and 1
//    after: every bit of the F32 operand enters, each product of parts is exact in fp32, and
//    tools/bench/gemm_accuracy.cpp measures the result 0.3-0.8x the error of an fp32 GEMM
//    (the CPU backend's) against float64. Never narrowed to one bf16 or to TF32 (250-20000x);
//  - A and B F32: one fp32 call (CUDA cores): the fp32 precision, which is the reference;
//    in a bf16 step only LoRA's rank-r products with its fp32 adapters (du = dy B, dx += du A);
//  - a BF16 C that would be rounded more than once (several calls) or that an F32 x F32 call
//    cannot write: widened into fp32 scratch, accumulated there, rounded back once.
// The scratch is the contract's (backend/gemm_scratch.h), recorded in the ledger.
#include <cstdint>

#include "backend/gemm_scratch.h"
#include "core/dtype.h"

namespace sbp::cuda {

enum class SplitOperand { none, a, b };

struct GemmPlan {
  SplitOperand split = SplitOperand::none;
  int calls = 1;               // cuBLASLt calls into C: 1, or one per part
  bool operands_bf16 = false;  // cuBLASLt's A and B type: BF16 (tensor cores) or F32
  bool widen_c = false;        // C BF16 -> fp32 scratch, the calls there, rounded back into C
  bool c_bf16 = false;         // cuBLASLt's C type is BF16 (one call on BF16 operands)
  GemmScratch scratch;         // where the parts and the fp32 C sit in the call's scratch
};

inline GemmPlan plan_gemm(DType a, DType b, DType c, int64_t a_numel, int64_t b_numel,
                          int64_t c_numel) {
  GemmPlan p;
  if (a != b) p.split = a == DType::F32 ? SplitOperand::a : SplitOperand::b;
  p.calls = p.split == SplitOperand::none ? 1 : kGemmSplitParts;
  p.operands_bf16 = a == DType::BF16 || b == DType::BF16;  // after the split
  p.widen_c = c == DType::BF16 && (p.calls > 1 || !p.operands_bf16);
  p.c_bf16 = c == DType::BF16 && !p.widen_c;
  p.scratch = gemm_scratch(c, a, b, c_numel, a_numel, b_numel);
  return p;
}

// Call i (0-based) of a plan: which part it multiplies (lo first: the small terms are summed
// before the large ones meet them) and the beta it adds C with.
inline int part_of_call(const GemmPlan& p, int i) { return p.calls - 1 - i; }
inline float beta_of_call(float beta, int i) { return i == 0 ? beta : 1.0f; }

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
