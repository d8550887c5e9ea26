// Token embedding lookup and its scatter-add backward.
#include <omp.h>

#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"

namespace sbp {

namespace {
// The ids index the table: checked here, where the data is, before the parallel loops.
void check_ids(const Tensor& ids, int64_t vocab) {
  const int32_t* p = ids.i32();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    SBP_CHECK(p[i] >= 0 && p[i] < vocab, "token id " + std::to_string(p[i]) + " at position " +
                                             std::to_string(i) + " outside the vocabulary of " +
                                             std::to_string(vocab));
  }
}
}  // namespace

void CpuBackend::embedding_forward_impl(const Tensor& x, const Tensor& ids, const Tensor& table) {
  const int64_t n = x.rows(), d = x.cols();
  check_ids(ids, table.rows());
  const int32_t* pid = ids.i32();  // (n)
  const float* pt = table.f32();   // (V, d)
  float* px = x.f32();             // (n, d)
#pragma omp parallel for schedule(static) if (n * d > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(px + i * d, pt + static_cast<int64_t>(pid[i]) * d, sizeof(float) * d);
}

void CpuBackend::embedding_backward_impl(const Tensor& dtable, const Tensor& dx,
                                         const Tensor& ids) {
  const int64_t n = dx.rows(), d = dx.cols();
  check_ids(ids, dtable.rows());
  const int32_t* pid = ids.i32();  // (n)
  const float* pdx = dx.f32();     // (n, d)
  float* pdt = dtable.f32();       // (V, d)
  // Repeated ids would race if rows were split across threads; splitting the columns keeps
  // every element's sum in row order (deterministic) with no atomics.
#pragma omp parallel if (n * d > cpu::kMinParallelWork)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t c0 = d * t / nt, c1 = d * (t + 1) / nt;
    for (int64_t i = 0; i < n; ++i) {
      float* dst = pdt + static_cast<int64_t>(pid[i]) * d;
      const float* src = pdx + i * d;
      for (int64_t j = c0; j < c1; ++j) dst[j] += src[j];
    }
  }
}

}  // namespace sbp
