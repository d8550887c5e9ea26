// RMSNorm forward/backward over the last dimension (also used per head for q/k-norm).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"

namespace sbp {

namespace {
// 1 / sqrt(mean(x^2) + eps), accumulated in fp32 as Hugging Face does (x.pow(2).mean(-1)).
inline float row_rstd(const float* x, int64_t d, float eps) {
  float ss = 0.0f;
  for (int64_t j = 0; j < d; ++j) ss += x[j] * x[j];
  return 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
}
}  // namespace

void CpuBackend::rmsnorm_forward_impl(const Tensor& y, const Tensor& x, const Tensor& g,
                                      float eps) {
  const int64_t d = g.numel();
  const int64_t rows = x.numel() / d;
  const float* px = x.f32();  // (rows, d)
  const float* pg = g.f32();  // (d)
  float* py = y.f32();        // (rows, d)
#pragma omp parallel for schedule(static) if (rows * d > cpu::kMinParallelWork)
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = px + i * d;
    float* yr = py + i * d;
    const float r = row_rstd(xr, d, eps);
    for (int64_t j = 0; j < d; ++j) yr[j] = pg[j] * (xr[j] * r);
  }
}

void CpuBackend::rmsnorm_backward_impl(const Tensor& dx, const Tensor& dg, const Tensor& dy,
                                       const Tensor& x, const Tensor& g, float eps) {
  // y = g * xh, xh = x * r, r = (mean(x^2) + eps)^-1/2
  // dg += sum_rows dy * xh;  dx += r * (dxh - xh * mean(dxh * xh)),  dxh = dy * g
  const int64_t d = g.numel();
  const int64_t rows = x.numel() / d;
  const float* px = x.f32();    // (rows, d)
  const float* pdy = dy.f32();  // (rows, d)
  const float* pg = g.f32();    // (d)
  float* pdx = dx.f32();        // (rows, d)
  const std::vector<double> dgsum =
      cpu::reduce_rows(rows, d, [&](int64_t b, int64_t e, double* acc) {
        for (int64_t i = b; i < e; ++i) {
          const float* xr = px + i * d;
          const float* dyr = pdy + i * d;
          float* dxr = pdx + i * d;
          const float r = row_rstd(xr, d, eps);
          float dot = 0.0f;  // sum_j dxh_j * xh_j
          for (int64_t j = 0; j < d; ++j) {
            const float xh = xr[j] * r;
            dot += dyr[j] * pg[j] * xh;
            acc[j] += static_cast<double>(dyr[j]) * xh;
          }
          const float mean = dot / static_cast<float>(d);
          for (int64_t j = 0; j < d; ++j) {
            const float xh = xr[j] * r;
            dxr[j] += r * (dyr[j] * pg[j] - xh * mean);
          }
        }
      });
  float* pdg = dg.f32();
  for (int64_t j = 0; j < d; ++j) pdg[j] += static_cast<float>(dgsum[static_cast<size_t>(j)]);
}

}  // namespace sbp
