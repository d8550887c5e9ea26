#pragma once
// A gemm call in words, for the errors and fallback lines of gemm.cu: the shape, the operand and
// output types, the transposes, leading dimensions and alignments, and what cuBLASLt answered.
// Plain C++ (tested on the CPU in tests/backend/cuda_gemm_plan_test.cpp), so that a refusal on
// the one GPU run says at once which call it was.
#include <cstdint>
#include <string>

namespace sbp::cuda {

// The row-major call C (M, N) = alpha op(A) op(B) + beta C, A and B of one type (after the
// split, gemm_plan.h), as gemm.cu hands it to cuBLASLt.
struct GemmCall {
  int64_t M = 0, N = 0, K = 0;
  const char* ab_type = "";  // "BF16" or "F32"
  const char* c_type = "";
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
  unsigned align_a = 0, align_b = 0, align_c = 0;  // bytes (gemm_plan.h alignment_of)
  bool beta = false;                               // C is read (beta != 0)
};

// cuBLAS's name for a status (cublasStatus_t's values), or "status <n>".
inline std::string cublas_status_name(int status) {
  switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "cuBLAS status " + std::to_string(status);
}

// "C (M, N) F32 = A^T (K, M) BF16 x B (K, N) BF16, K = k, beta 1; leading dimensions lda, ldb,
// ldc; alignments a, b, c bytes": A and B as stored (row-major), then what op() makes of them.
inline std::string describe(const GemmCall& g) {
  auto dims = [](int64_t r, int64_t c) {
    return "(" + std::to_string(r) + ", " + std::to_string(c) + ")";
  };
  const std::string a = std::string(g.trans_a ? "A^T, A " : "A ") +
                        (g.trans_a ? dims(g.K, g.M) : dims(g.M, g.K));
  const std::string b = std::string(g.trans_b ? "B^T, B " : "B ") +
                        (g.trans_b ? dims(g.N, g.K) : dims(g.K, g.N));
  return "C " + dims(g.M, g.N) + " " + g.c_type + " = " + a + " " + g.ab_type + " x " + b + " " +
         g.ab_type + ", M = " + std::to_string(g.M) + ", N = " + std::to_string(g.N) +
         ", K = " + std::to_string(g.K) + (g.beta ? ", beta != 0 (C read)" : ", beta 0") +
         "; row-major leading dimensions lda " + std::to_string(g.lda) + ", ldb " +
         std::to_string(g.ldb) + ", ldc " + std::to_string(g.ldc) + "; alignments A " +
         std::to_string(g.align_a) + ", B " + std::to_string(g.align_b) + ", C " +
         std::to_string(g.align_c) + " bytes";
}

}  // namespace sbp::cuda
