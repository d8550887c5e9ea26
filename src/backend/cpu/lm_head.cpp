// Log-softmax of the target token and the in-place logits gradient, one row at a time, so
// the LM head never needs more than the (n, V) block it is given.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/vec_math.h"

namespace sbp {

namespace {
// Targets index the logits row: checked here, where the data is, before the parallel loops.
// (Negative targets mean "no target".)
void check_targets(const Tensor& targets, int64_t vocab) {
  const int32_t* p = targets.i32();
  for (int64_t i = 0; i < targets.numel(); ++i) {
    SBP_CHECK(p[i] < vocab, "target id " + std::to_string(p[i]) + " outside the vocabulary of " +
                                std::to_string(vocab));
  }
}
}  // namespace

void CpuBackend::logsoftmax_target_impl(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                                        const Tensor& targets) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(targets, V);
  const float* pl = logits.f32();     // (n, V)
  const int32_t* pt = targets.i32();  // (n)
  float* plse = lse.f32();            // (n)
  float* plogp = logp.f32();          // (n)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = pl + i * V;
    float mx = -INFINITY;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    // Sum in fp32 lanes (vectorised), 8 independent partial sums keep the error ~1e-7.
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += cpu::exp_f32(row[j] - mx);
    const float log_sum = std::log(sum);
    plse[i] = mx + log_sum;
    // (x_t - max) is exact for nearby values; subtracting the rounded lse instead would lose
    // the low bits when the logits are large.
    plogp[i] = pt[i] >= 0 ? (row[pt[i]] - mx) - log_sum : 0.0f;
  }
}

void CpuBackend::dlogits_inplace_impl(const Tensor& logits, const Tensor& lse,
                                      const Tensor& targets, const Tensor& dlogp) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(targets, V);
  float* pl = logits.f32();           // (n, V) in: logits, out: dL/dlogits
  const float* plse = lse.f32();      // (n)
  const int32_t* pt = targets.i32();  // (n)
  const float* pw = dlogp.f32();      // (n)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    float* row = pl + i * V;
    const float w = pt[i] >= 0 ? pw[i] : 0.0f;
    const float l = plse[i];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) row[j] = -w * cpu::exp_f32(row[j] - l);
    if (pt[i] >= 0) row[pt[i]] += w;
  }
}

void CpuBackend::argmax_rows_impl(const Tensor& out, const Tensor& logits) {
  const int64_t n = logits.rows(), V = logits.cols();
  const float* pl = logits.f32();  // (n, V)
  int32_t* po = out.i32();         // (n)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float* row = pl + i * V;
    int64_t best = 0;
    for (int64_t j = 1; j < V; ++j)
      if (row[j] > row[best]) best = j;
    po[i] = static_cast<int32_t>(best);
  }
}

}  // namespace sbp
