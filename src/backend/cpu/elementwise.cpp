// Fill (a value, or counter-based normal numbers), copy (with F32/BF16 conversion), residual
// add, scale, bias, sum of squares. Every float tensor may be F32 or BF16 (storage.h): computed
// in fp32, sums in fp64.
#include <cstring>

#include "core/counter_normal.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_kernels.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

template <class T>
void fill_kernel(T* p, int64_t n, float value) {  // p (n)
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) store(p[i], value);
}

// p (n): element i is number offset + i of the stream with key `key` (core/counter_normal.h).
template <class T>
void fill_normal_kernel(T* p, int64_t n, uint64_t key, uint64_t offset, float mean, float std) {
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork / 64)
  for (int64_t i = 0; i < n; ++i)
    store(p[i], counter_normal_value(key, offset + static_cast<uint64_t>(i), mean, std));
}

template <class TD, class TS>
void convert_kernel(TD* d, const TS* s, int64_t n) {  // d, s (n)
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) store(d[i], load(s[i]));
}

template <class TY, class TX>
void add_kernel(TY* py, const TX* px, int64_t n) {  // py, px (n)
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) store(py[i], load(py[i]) + load(px[i]));
}

template <class T>
void scale_kernel(T* p, int64_t n, float s) {  // p (n)
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) store(p[i], load(p[i]) * s);
}

template <class T>
double sum_squares_kernel(const T* p, int64_t n) {  // p (n)
  const std::vector<double> total = cpu::reduce_rows(n, 1, [&](int64_t b, int64_t e, double* acc) {
    double s = 0.0;
    for (int64_t i = b; i < e; ++i) {
      const float v = load(p[i]);
      s += static_cast<double>(v) * v;
    }
    acc[0] = s;
  });
  return total[0];
}

template <class TY, class TB>
void add_bias_kernel(TY* py, const TB* pb, int64_t n, int64_t m) {  // py (n, m), pb (m)
#pragma omp parallel for schedule(static) if (n * m > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    TY* row = py + i * m;
    for (int64_t j = 0; j < m; ++j) store(row[j], load(row[j]) + load(pb[j]));
  }
}

template <class TDB, class TDY>
void bias_backward_kernel(TDB* pdb, const TDY* pdy, int64_t n, int64_t m) {
  // pdb (m), pdy (n, m)
  const std::vector<double> sum = cpu::reduce_rows(n, m, [&](int64_t b, int64_t e, double* acc) {
    for (int64_t i = b; i < e; ++i)
      for (int64_t j = 0; j < m; ++j) acc[j] += load(pdy[i * m + j]);
  });
  // One rounding per element and call when db is BF16.
  for (int64_t j = 0; j < m; ++j)
    store(pdb[j], load(pdb[j]) + static_cast<float>(sum[static_cast<size_t>(j)]));
}

}  // namespace

void cpu::fill_floats(const Tensor& x, float value) {
  cpu::with_float_data([&](auto* p) { fill_kernel(p, x.numel(), value); }, x);
}

void CpuBackend::fill_impl(const Tensor& x, float value) { cpu::fill_floats(x, value); }

void CpuBackend::fill_normal_impl(const Tensor& x, float mean, float std, uint64_t seed,
                                  uint64_t stream, uint64_t offset) {
  const uint64_t key = counter_normal_key(seed, stream);
  cpu::with_float_data([&](auto* p) { fill_normal_kernel(p, x.numel(), key, offset, mean, std); },
                       x);
}

void cpu::copy_floats(const Tensor& dst, const Tensor& src) {
  if (dst.dtype == src.dtype) {
    std::memcpy(dst.data, src.data, dst.nbytes());
    return;
  }
  // F32 <-> BF16: Backend::copy allows no other pair of dtypes.
  cpu::with_float_data([&](auto* d, const auto* s) { convert_kernel(d, s, dst.numel()); }, dst,
                       src);
}

void cpu::add_floats(const Tensor& y, const Tensor& x) {
  cpu::with_float_data([&](auto* py, const auto* px) { add_kernel(py, px, y.numel()); }, y, x);
}

void cpu::scale_floats(const Tensor& x, float s) {
  cpu::with_float_data([&](auto* p) { scale_kernel(p, x.numel(), s); }, x);
}

double cpu::sum_squares_floats(const Tensor& x) {
  double result = 0.0;
  cpu::with_float_data([&](const auto* p) { result = sum_squares_kernel(p, x.numel()); }, x);
  return result;
}

void CpuBackend::copy_impl(const Tensor& dst, const Tensor& src) { cpu::copy_floats(dst, src); }

void CpuBackend::add_inplace_impl(const Tensor& y, const Tensor& x) { cpu::add_floats(y, x); }

void CpuBackend::scale_inplace_impl(const Tensor& x, float s) { cpu::scale_floats(x, s); }

double CpuBackend::sum_squares_impl(const Tensor& x) { return cpu::sum_squares_floats(x); }

void CpuBackend::add_bias_impl(const Tensor& y, const Tensor& b) {
  cpu::with_float_data(
      [&](auto* py, const auto* pb) { add_bias_kernel(py, pb, y.rows(), y.cols()); }, y, b);
}

void CpuBackend::bias_backward_impl(const Tensor& db, const Tensor& dy) {
  cpu::with_float_data(
      [&](auto* pdb, const auto* pdy) { bias_backward_kernel(pdb, pdy, dy.rows(), dy.cols()); }, db,
      dy);
}

}  // namespace sbp
