// AdamW with decoupled weight decay, in the order torch.optim.AdamW applies it. param and grad
// may be F32 or BF16 (storage.h); m, v are F32; the update is computed in fp32 and a BF16 param
// is rounded once per step.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

template <class TP, class TG>
void adamw_kernel(TP* p, const TG* g, float* pm, float* pv, int64_t n, const AdamWStep& s) {
  // p, g, pm, pv (n)
  const double bc1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float step_size = static_cast<float>(s.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps;
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    float pi = load(p[i]) * decay;
    const float gi = load(g[i]);
    pm[i] = b1 * pm[i] + (1.0f - b1) * gi;
    pv[i] = b2 * pv[i] + (1.0f - b2) * gi * gi;
    const float denom = std::sqrt(pv[i]) / bc2_sqrt + eps;
    pi -= step_size * pm[i] / denom;
    store(p[i], pi);
  }
}

}  // namespace

void CpuBackend::adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m,
                                 const Tensor& v, const AdamWStep& s) {
  cpu::with_float_data(
      [&](auto* p, const auto* g) { adamw_kernel(p, g, m.f32(), v.f32(), param.numel(), s); },
      param, grad);
}

}  // namespace sbp
