// Entropy of the LM head's softmax per row, and its gradient folded into the in-place logits
// gradient: like lm_head.cpp, one row at a time, so nothing beyond the (n, V) block exists.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/vec_math.h"

namespace sbp {

void CpuBackend::softmax_entropy_impl(const Tensor& entropy, const Tensor& logits,
                                      const Tensor& lse) {
  const int64_t n = logits.rows(), V = logits.cols();
  const float* pl = logits.f32();  // (n, V)
  const float* plse = lse.f32();   // (n)
  float* ph = entropy.f32();       // (n)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = pl + i * V;
    const float l = plse[i];
    // H = sum_j p_j (lse - z_j), each term >= 0; fp32 lanes as in logsoftmax_target.
    float h = 0.0f;
#pragma omp simd reduction(+ : h)
    for (int64_t j = 0; j < V; ++j) {
      const float nlogp = l - row[j];
      h += cpu::exp_f32(-nlogp) * nlogp;
    }
    ph[i] = h;
  }
}

void CpuBackend::dlogits_entropy_inplace_impl(const Tensor& logits, const Tensor& lse,
                                              const Tensor& targets, const Tensor& dlogp,
                                              const Tensor& entropy, const Tensor& dentropy) {
  const int64_t n = logits.rows(), V = logits.cols();
  float* pl = logits.f32();           // (n, V) in: logits, out: dL/dlogits
  const float* plse = lse.f32();      // (n)
  const int32_t* pt = targets.i32();  // (n)
  const float* pw = dlogp.f32();      // (n)
  const float* ph = entropy.f32();    // (n)
  const float* pe = dentropy.f32();   // (n)
  for (int64_t i = 0; i < n; ++i)     // targets index the row: checked before the parallel loop
    SBP_CHECK(pt[i] < V, "target id " + std::to_string(pt[i]) + " outside the vocabulary of " +
                             std::to_string(V));
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    float* row = pl + i * V;
    const float w = pt[i] >= 0 ? pw[i] : 0.0f;
    const float l = plse[i], H = ph[i], e = pe[i];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) {
      const float nlogp = l - row[j];  // -log p_j
      const float p = cpu::exp_f32(-nlogp);
      row[j] = p * (-w + e * (nlogp - H));
    }
    if (pt[i] >= 0) row[pt[i]] += w;
  }
}

}  // namespace sbp
