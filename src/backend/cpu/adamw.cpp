// AdamW with decoupled weight decay, in the order torch.optim.AdamW applies it
// (backend/adamw_math.h, the formula the CUDA kernel and the host optimizer share). param and
// grad may be F32 or BF16 (storage.h); m, v are F32; the update is computed in fp32 and a BF16
// param is rounded once per step.
#include "backend/adamw_math.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_kernels.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

template <class TP, class TG>
void adamw_kernel(TP* p, const TG* g, float* pm, float* pv, int64_t n, const AdamWStep& s) {
  // p, g, pm, pv (n)
  const AdamWScalars sc = adamw_scalars(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step);
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) store(p[i], adamw_update(load(p[i]), load(g[i]), &pm[i], &pv[i], sc));
}

}  // namespace

void cpu::adamw_floats(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWStep& s) {
  cpu::with_float_data(
      [&](auto* p, const auto* g) { adamw_kernel(p, g, m.f32(), v.f32(), param.numel(), s); },
      param, grad);
}

void CpuBackend::adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m,
                                 const Tensor& v, const AdamWStep& s) {
  cpu::adamw_floats(param, grad, m, v, s);
}

}  // namespace sbp
