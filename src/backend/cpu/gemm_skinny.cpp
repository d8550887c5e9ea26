#include "backend/cpu/gemm_skinny.h"

#include <algorithm>

#include "backend/cpu/vec_math.h"

namespace sbp::cpu {

namespace {

// Columns of C (rows of B) per step of the loop: four rows of B share each load of an A row.
constexpr int64_t kCols = 4;

// s[c] = dot(a, b_c) for kCols rows b_c of B, K long. The sums are split into 16 lanes summed
// lane by lane (a fixed order that the vectorizer maps onto its registers), then the lanes
// are added in a fixed order: the result depends on K only, not on M, j or the thread.
inline void dot4(const float* a, const float* b0, const float* b1, const float* b2,
                 const float* b3, int64_t K, float s[kCols]) {
  constexpr int kLanes = 16;
  float l0[kLanes] = {}, l1[kLanes] = {}, l2[kLanes] = {}, l3[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float x = a[k + l];
      l0[l] = fmadd(x, b0[k + l], l0[l]);
      l1[l] = fmadd(x, b1[k + l], l1[l]);
      l2[l] = fmadd(x, b2[k + l], l2[l]);
      l3[l] = fmadd(x, b3[k + l], l3[l]);
    }
  for (int l = 0; k + l < K; ++l) {  // the tail, into the first lanes
    const float x = a[k + l];
    l0[l] = fmadd(x, b0[k + l], l0[l]);
    l1[l] = fmadd(x, b1[k + l], l1[l]);
    l2[l] = fmadd(x, b2[k + l], l2[l]);
    l3[l] = fmadd(x, b3[k + l], l3[l]);
  }
  float t[kCols] = {};
  for (int l = 0; l < kLanes; ++l) {
    t[0] += l0[l];
    t[1] += l1[l];
    t[2] += l2[l];
    t[3] += l3[l];
  }
  std::copy(t, t + kCols, s);
}

}  // namespace

bool skinny_applies(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B,
                    bool trans_b) {
  return !trans_a && trans_b && A.rows() <= kSkinnyMaxRows && A.dtype == DType::F32 &&
         B.dtype == DType::F32 && C.dtype == DType::F32;
}

void gemm_skinny_nt(const Tensor& C, const Tensor& A, const Tensor& B, float alpha, float beta) {
  const int64_t M = A.rows(), K = A.cols(), N = B.rows();
  const float* a = A.f32();
  const float* b = B.f32();
  float* c = C.f32();
  const int64_t blocks = (N + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kCols;
    // A short last block repeats its last row of B; the repeats are computed, not stored.
    const float* rows[kCols];
    for (int64_t q = 0; q < kCols; ++q) rows[q] = b + std::min(j0 + q, N - 1) * K;
    const int64_t n = std::min(kCols, N - j0);
    for (int64_t i = 0; i < M; ++i) {
      float s[kCols];
      dot4(a + i * K, rows[0], rows[1], rows[2], rows[3], K, s);
      float* ci = c + i * N + j0;
      for (int64_t q = 0; q < n; ++q)
        ci[q] = beta == 0.0f ? alpha * s[q] : fmadd(beta, ci[q], alpha * s[q]);
    }
  }
}

}  // namespace sbp::cpu
