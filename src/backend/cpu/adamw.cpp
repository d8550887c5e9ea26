// AdamW with decoupled weight decay, in the order torch.optim.AdamW applies it.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"

namespace sbp {

void CpuBackend::adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m,
                                 const Tensor& v, const AdamWStep& s) {
  const int64_t n = param.numel();
  float* p = param.f32();
  const float* g = grad.f32();
  float* pm = m.f32();
  float* pv = v.f32();
  const double bc1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  const float step_size = static_cast<float>(s.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - s.lr * s.weight_decay;
  const float b1 = s.beta1, b2 = s.beta2, eps = s.eps;
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= decay;
    pm[i] = b1 * pm[i] + (1.0f - b1) * g[i];
    pv[i] = b2 * pv[i] + (1.0f - b2) * g[i] * g[i];
    const float denom = std::sqrt(pv[i]) / bc2_sqrt + eps;
    p[i] -= step_size * pm[i] / denom;
  }
}

}  // namespace sbp
