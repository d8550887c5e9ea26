// Fill, copy (with F32/BF16 conversion), residual add, scale, bias, sum of squares.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"

namespace sbp {

void CpuBackend::fill_impl(const Tensor& x, float value) {
  float* p = x.f32();  // (numel)
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

void CpuBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (dst.dtype == src.dtype) {
    std::memcpy(dst.data, src.data, dst.nbytes());
  } else if (dst.dtype == DType::BF16 && src.dtype == DType::F32) {
    uint16_t* d = static_cast<uint16_t*>(dst.data);
    const float* s = src.f32();
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
  } else {  // F32 <- BF16: Backend::copy allows no other pair of dtypes
    float* d = dst.f32();
    const uint16_t* s = static_cast<const uint16_t*>(src.data);
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  }
}

void CpuBackend::add_inplace_impl(const Tensor& y, const Tensor& x) {
  float* py = y.f32();
  const float* px = x.f32();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) py[i] += px[i];
}

void CpuBackend::scale_inplace_impl(const Tensor& x, float s) {
  float* p = x.f32();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) p[i] *= s;
}

double CpuBackend::sum_squares_impl(const Tensor& x) {
  const float* p = x.f32();
  const int64_t n = x.numel();
  const std::vector<double> total = cpu::reduce_rows(n, 1, [&](int64_t b, int64_t e, double* acc) {
    double s = 0.0;
    for (int64_t i = b; i < e; ++i) s += static_cast<double>(p[i]) * p[i];
    acc[0] = s;
  });
  return total[0];
}

void CpuBackend::add_bias_impl(const Tensor& y, const Tensor& b) {
  const int64_t n = y.rows(), m = y.cols();
  float* py = y.f32();        // (n, m)
  const float* pb = b.f32();  // (m)
#pragma omp parallel for schedule(static) if (n * m > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    float* row = py + i * m;
    for (int64_t j = 0; j < m; ++j) row[j] += pb[j];
  }
}

void CpuBackend::bias_backward_impl(const Tensor& db, const Tensor& dy) {
  const int64_t n = dy.rows(), m = dy.cols();
  const float* pdy = dy.f32();  // (n, m)
  const std::vector<double> sum = cpu::reduce_rows(n, m, [&](int64_t b, int64_t e, double* acc) {
    for (int64_t i = b; i < e; ++i)
      for (int64_t j = 0; j < m; ++j) acc[j] += pdy[i * m + j];
  });
  float* pdb = db.f32();  // (m)
  for (int64_t j = 0; j < m; ++j) pdb[j] += static_cast<float>(sum[static_cast<size_t>(j)]);
}

}  // namespace sbp
