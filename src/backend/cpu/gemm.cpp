// Dense products through the configured BLAS's sgemm (row-major; backend/cpu/blas.h). All-F32
// calls go to sgemm directly, except x W^T with at most 16 rows of x (gemm_skinny.h: no packing
// of W); calls with a BF16 operand to gemm_mixed (gemm_bf16.cpp: widened panels, sgemm,
// measured there).
#include <omp.h>

#include "backend/cpu/blas.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_skinny.h"

namespace sbp {

void CpuBackend::gemm_impl(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B,
                           bool trans_b, float alpha, float beta, const Tensor&) {
  // A viewed as (rows, cols); op(A) is (M, K), op(B) is (K, N), C is (M, N).
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  flops_ += 2 * M * N * K;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f)
      fill(C, 0.0f);
    else if (beta != 1.0f)
      scale_inplace(C, beta);
    return;
  }
  if (A.dtype != DType::F32 || B.dtype != DType::F32 || C.dtype != DType::F32) {
    cpu::gemm_mixed(C, A, trans_a, B, trans_b, alpha, beta);
    return;
  }
  if (cpu::skinny_applies(C, A, trans_a, B, trans_b)) {  // a decoding step's few rows
    cpu::gemm_skinny_nt(C, A, B, alpha, beta);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A.f32(), static_cast<int>(A.cols()), B.f32(),
              static_cast<int>(B.cols()), beta, C.f32(), static_cast<int>(C.cols()));
}

void set_cpu_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
  cpu::blas_set_threads(omp_get_max_threads());
}

int cpu_threads() { return omp_get_max_threads(); }

}  // namespace sbp
