// Entropy of the LM head's softmax per row, and its gradient folded into the in-place logits
// gradient: like lm_head.cpp, one row at a time, so nothing beyond the (n, V) block exists.
// The logits may be F32 or BF16 (storage.h), as in lm_head.cpp.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"
#include "backend/cpu/vec_math.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

template <class TL>
void entropy_kernel(float* ph, const TL* pl, const float* plse, int64_t n, int64_t V) {
  // ph, plse (n); pl (n, V)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const TL* row = pl + i * V;
    const float l = plse[i];
    // H = sum_j p_j (lse - z_j), each term >= 0; fp64 lanes as in logsoftmax_target (fp32
    // lanes drop the vocabulary's tail once they hold the top terms).
    double h = 0.0;
#pragma omp simd reduction(+ : h)
    for (int64_t j = 0; j < V; ++j) {
      const float nlogp = l - load(row[j]);
      h += static_cast<double>(cpu::exp_f32(-nlogp) * nlogp);
    }
    ph[i] = static_cast<float>(h);
  }
}

template <class TL>
void dlogits_entropy_kernel(TL* pl, const float* plse, const int32_t* pt, const float* pw,
                            const float* ph, const float* pe, int64_t n, int64_t V) {
  // pl (n, V) in: logits, out: dL/dlogits; plse, pt, pw, ph, pe (n)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    TL* row = pl + i * V;
    const float w = pt[i] >= 0 ? pw[i] : 0.0f;
    const float l = plse[i], H = ph[i], e = pe[i];
    // BF16: the target's gradient is finished in fp32 below, from its logit read here, so
    // that it is rounded once.
    const float zt = pt[i] >= 0 ? load(row[pt[i]]) : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) {
      const float nlogp = l - load(row[j]);  // -log p_j
      const float p = cpu::exp_f32(-nlogp);
      store(row[j], p * (-w + e * (nlogp - H)));
    }
    if (pt[i] >= 0) {
      if constexpr (cpu::is_bf16<TL>) {
        const float nlogp = l - zt;
        store(row[pt[i]], cpu::exp_f32(-nlogp) * (-w + e * (nlogp - H)) + w);
      } else {
        row[pt[i]] += w;
      }
    }
  }
}

}  // namespace

void CpuBackend::softmax_entropy_impl(const Tensor& entropy, const Tensor& logits,
                                      const Tensor& lse) {
  cpu::with_float_data(
      [&](const auto* pl) {
        entropy_kernel(entropy.f32(), pl, lse.f32(), logits.rows(), logits.cols());
      },
      logits);
}

void CpuBackend::dlogits_entropy_inplace_impl(const Tensor& logits, const Tensor& lse,
                                              const Tensor& targets, const Tensor& dlogp,
                                              const Tensor& entropy, const Tensor& dentropy) {
  const int64_t n = logits.rows(), V = logits.cols();
  const int32_t* pt = targets.i32();  // (n)
  for (int64_t i = 0; i < n; ++i)     // targets index the row: checked before the parallel loop
    SBP_CHECK(pt[i] < V, "target id " + std::to_string(pt[i]) + " outside the vocabulary of " +
                             std::to_string(V));
  cpu::with_float_data(
      [&](auto* pl) {
        dlogits_entropy_kernel(pl, lse.f32(), pt, dlogp.f32(), entropy.f32(), dentropy.f32(), n, V);
      },
      logits);
}

}  // namespace sbp
