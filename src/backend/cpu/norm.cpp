// RMSNorm forward/backward over the last dimension (also used per head for q/k-norm).
// x, g, y, dy, dx, dg may each be F32 or BF16 (storage.h); all arithmetic in fp32, the dg sum
// over rows in fp64.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

// 1 / sqrt(mean(x^2) + eps), accumulated in fp32 as Hugging Face does (x.pow(2).mean(-1)).
template <class TX>
inline float row_rstd(const TX* x, int64_t d, float eps) {
  float ss = 0.0f;
  for (int64_t j = 0; j < d; ++j) ss += load(x[j]) * load(x[j]);
  return 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
}

template <class TY, class TX, class TG>
void rmsnorm_forward_kernel(TY* py, const TX* px, const TG* pg, int64_t rows, int64_t d,
                            float eps, float off) {  // py, px (rows, d); pg (d)
#pragma omp parallel for schedule(static) if (rows * d > cpu::kMinParallelWork)
  for (int64_t i = 0; i < rows; ++i) {
    const TX* xr = px + i * d;
    TY* yr = py + i * d;
    const float r = row_rstd(xr, d, eps);
    for (int64_t j = 0; j < d; ++j) store(yr[j], (off + load(pg[j])) * (load(xr[j]) * r));
  }
}

// y = (off + g) * xh, xh = x * r, r = (mean(x^2) + eps)^-1/2
// dg += sum_rows dy * xh;  dx += r * (dxh - xh * mean(dxh * xh)),  dxh = dy * (off + g)
template <class TDX, class TDG, class TDY, class TX, class TG>
void rmsnorm_backward_kernel(TDX* pdx, TDG* pdg, const TDY* pdy, const TX* px, const TG* pg,
                             int64_t rows, int64_t d, float eps, float off) {
  // pdx, pdy, px (rows, d); pdg, pg (d)
  const std::vector<double> dgsum =
      cpu::reduce_rows(rows, d, [&](int64_t b, int64_t e, double* acc) {
        for (int64_t i = b; i < e; ++i) {
          const TX* xr = px + i * d;
          const TDY* dyr = pdy + i * d;
          TDX* dxr = pdx + i * d;
          const float r = row_rstd(xr, d, eps);
          float dot = 0.0f;  // sum_j dxh_j * xh_j
          for (int64_t j = 0; j < d; ++j) {
            const float xh = load(xr[j]) * r;
            dot += load(dyr[j]) * (off + load(pg[j])) * xh;
            acc[j] += static_cast<double>(load(dyr[j])) * xh;
          }
          const float mean = dot / static_cast<float>(d);
          for (int64_t j = 0; j < d; ++j) {
            const float xh = load(xr[j]) * r;
            store(dxr[j], load(dxr[j]) + r * (load(dyr[j]) * (off + load(pg[j])) - xh * mean));
          }
        }
      });
  // One rounding per element and call when dg is BF16.
  for (int64_t j = 0; j < d; ++j)
    store(pdg[j], load(pdg[j]) + static_cast<float>(dgsum[static_cast<size_t>(j)]));
}

}  // namespace

void CpuBackend::rmsnorm_forward_impl(const Tensor& y, const Tensor& x, const Tensor& g,
                                      float eps, float weight_offset) {
  const int64_t d = g.numel();
  cpu::with_float_data(
      [&](auto* py, const auto* px, const auto* pg) {
        rmsnorm_forward_kernel(py, px, pg, x.numel() / d, d, eps, weight_offset);
      },
      y, x, g);
}

void CpuBackend::rmsnorm_backward_impl(const Tensor& dx, const Tensor& dg, const Tensor& dy,
                                       const Tensor& x, const Tensor& g, float eps,
                                       float weight_offset) {
  const int64_t d = g.numel();
  cpu::with_float_data(
      [&](auto* pdx, auto* pdg, const auto* pdy, const auto* px, const auto* pg) {
        rmsnorm_backward_kernel(pdx, pdg, pdy, px, pg, x.numel() / d, d, eps, weight_offset);
      },
      dx, dg, dy, x, g);
}

}  // namespace sbp
