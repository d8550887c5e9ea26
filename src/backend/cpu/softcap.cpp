// Logit soft-capping (Gemma's final_logit_softcapping): y = cap * tanh(x / cap), in place, and
// its backward from the capped values, dx *= 1 - (y / cap)^2. F32 or BF16 storage; fp32 math.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

template <class TX>
void softcap_forward_kernel(TX* px, int64_t n, float cap) {  // (n) in place
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) store(px[i], cap * std::tanh(load(px[i]) / cap));
}

template <class TDX, class TY>
void softcap_backward_kernel(TDX* pdx, const TY* py, int64_t n, float cap) {  // (n)
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float t = load(py[i]) / cap;  // tanh(x / cap)
    store(pdx[i], load(pdx[i]) * (1.0f - t * t));
  }
}

}  // namespace

void CpuBackend::softcap_forward_impl(const Tensor& x, float cap) {
  cpu::with_float_data([&](auto* px) { softcap_forward_kernel(px, x.numel(), cap); }, x);
}

void CpuBackend::softcap_backward_impl(const Tensor& dx, const Tensor& y, float cap) {
  cpu::with_float_data(
      [&](auto* pdx, const auto* py) { softcap_backward_kernel(pdx, py, dx.numel(), cap); }, dx,
      y);
}

}  // namespace sbp
