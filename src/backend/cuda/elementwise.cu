// Fill (a value, or counter-based normal numbers), copy (with F32/BF16 conversion), residual add, scale, bias and its backward, sum of
// squares. Float tensors may be F32 or BF16 (device_ptr.cuh); arithmetic in fp32, sums in fp64
// in a fixed order (reduce.cuh).
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/reduce.cuh"
#include "core/counter_normal.h"

namespace sbp {

namespace {

using cuda::FPtr;
using cuda::fptr;
using cuda::grid_for;

constexpr int kThreads = 256;
// sum_squares: a fixed grid, so every element goes to the same thread and tree every time.
constexpr int kSumBlocks = 512;

#define SBP_GRID_STRIDE(i, n)                                                   \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void fill_kernel(FPtr x, int64_t n, float value) {
  SBP_GRID_STRIDE(i, n) x.st(i, value);
}
// Element i: number offset + i of the stream with key `key` (core/counter_normal.h, the CPU
// backend's formula: the same values).
__global__ void fill_normal_kernel(FPtr x, int64_t n, uint64_t key, uint64_t offset, float mean,
                                   float std) {
  SBP_GRID_STRIDE(i, n) x.st(i, counter_normal_value(key, offset + static_cast<uint64_t>(i), mean, std));
}
__global__ void convert_kernel(FPtr d, FPtr s, int64_t n) {
  SBP_GRID_STRIDE(i, n) d.st(i, s.ld(i));
}
__global__ void add_kernel(FPtr y, FPtr x, int64_t n) {
  SBP_GRID_STRIDE(i, n) y.st(i, y.ld(i) + x.ld(i));
}
__global__ void scale_kernel(FPtr x, int64_t n, float s) {
  SBP_GRID_STRIDE(i, n) x.st(i, x.ld(i) * s);
}
__global__ void add_bias_kernel(FPtr y, FPtr b, int64_t n, int64_t m) {  // y (n, m), b (m)
  SBP_GRID_STRIDE(i, n * m) y.st(i, y.ld(i) + b.ld(i % m));
}

// Pass 1: partial[block] = sum of x^2 over this block's grid-stride elements, fp64, fixed tree.
__global__ void sum_squares_partial_kernel(double* partial, FPtr x, int64_t n) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  SBP_GRID_STRIDE(i, n) {
    const double v = x.ld(i);
    s += v * v;
  }
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
// Pass 2: one block adds the partials in a fixed tree.
__global__ void sum_partials_kernel(double* out, const double* partial, int count) {
  __shared__ double sh[kThreads];
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) s += partial[i];
  sh[threadIdx.x] = s;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

struct BiasGradValue {
  FPtr dy;
  int64_t m;
  __device__ float operator()(int64_t i, int64_t j) const { return dy.ld(i * m + j); }
};

}  // namespace

void CudaBackend::fill_impl(const Tensor& x, float value) {
  const int64_t n = x.numel();
  if (n == 0) return;
  SBP_LAUNCH(fill_kernel, grid_for(n, kThreads), kThreads, 0, stream_, fptr(x), n, value);
}

void CudaBackend::fill_normal_impl(const Tensor& x, float mean, float std, uint64_t seed,
                                   uint64_t stream, uint64_t offset) {
  const int64_t n = x.numel();
  if (n == 0) return;
  SBP_LAUNCH(fill_normal_kernel, grid_for(n, kThreads), kThreads, 0, stream_, fptr(x), n,
             counter_normal_key(seed, stream), offset, mean, std);
}

void CudaBackend::copy_impl(const Tensor& dst, const Tensor& src) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    SBP_CUDA(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  SBP_LAUNCH(convert_kernel, grid_for(n, kThreads), kThreads, 0, stream_, fptr(dst), fptr(src), n);
}

void CudaBackend::add_inplace_impl(const Tensor& y, const Tensor& x) {
  const int64_t n = y.numel();
  if (n == 0) return;
  SBP_LAUNCH(add_kernel, grid_for(n, kThreads), kThreads, 0, stream_, fptr(y), fptr(x), n);
}

void CudaBackend::scale_inplace_impl(const Tensor& x, float s) {
  const int64_t n = x.numel();
  if (n == 0) return;
  SBP_LAUNCH(scale_kernel, grid_for(n, kThreads), kThreads, 0, stream_, fptr(x), n, s);
}

double CudaBackend::sum_squares_impl(const Tensor& x) {
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
  auto* partial = static_cast<double*>(scratch(kScratchRows, (kSumBlocks + 1) * sizeof(double)));
  SBP_LAUNCH(sum_squares_partial_kernel, kSumBlocks, kThreads, 0, stream_, partial, fptr(x), n);
  SBP_LAUNCH(sum_partials_kernel, 1, kThreads, 0, stream_,
             partial + kSumBlocks, partial, kSumBlocks);
  double result = 0.0;
  download_impl(&result, partial + kSumBlocks, sizeof result);  // the one wait, checks read too
  return result;
}

// Every tensor's partials and total into one scratch buffer, then one download for all totals.
void CudaBackend::sum_squares_each_impl(std::span<const Tensor> xs, std::span<double> out) {
  const size_t per = kSumBlocks + 1;  // partials, then the total
  auto* partial = static_cast<double*>(scratch(kScratchRows, per * xs.size() * sizeof(double)));
  for (size_t i = 0; i < xs.size(); ++i) {
    double* p = partial + i * per;
    const int64_t n = xs[i].numel();
    if (n == 0) {
      SBP_CUDA(cudaMemsetAsync(p + kSumBlocks, 0, sizeof(double), stream_));
      continue;
    }
    SBP_LAUNCH(sum_squares_partial_kernel, kSumBlocks, kThreads, 0, stream_, p, fptr(xs[i]), n);
    SBP_LAUNCH(sum_partials_kernel, 1, kThreads, 0, stream_, p + kSumBlocks, p, kSumBlocks);
  }
  if (xs.empty()) return;
  std::vector<double> all(per * xs.size());
  download_impl(all.data(), partial, sizeof(double) * all.size());  // the one wait
  for (size_t i = 0; i < xs.size(); ++i) out[i] = all[i * per + kSumBlocks];
}

void CudaBackend::add_bias_impl(const Tensor& y, const Tensor& b) {
  const int64_t n = y.rows(), m = y.cols();
  if (n * m == 0) return;
  SBP_LAUNCH(add_bias_kernel, grid_for(n * m, kThreads), kThreads, 0, stream_,
             fptr(y), fptr(b), n, m);
}

void CudaBackend::bias_backward_impl(const Tensor& db, const Tensor& dy) {
  const int64_t n = dy.rows(), m = dy.cols();
  if (m == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(cuda::kRowBlocks, std::max<int64_t>(n, 1)));
  auto* partial = static_cast<double*>(scratch(kScratchRows, sizeof(double) * blocks * m));
  const dim3 grid(static_cast<unsigned>((m + kThreads - 1) / kThreads), blocks);
  SBP_LAUNCH(cuda::column_partials_kernel<BiasGradValue>, grid, kThreads, 0, stream_,
             partial, n, m, blocks, BiasGradValue{fptr(dy), m});
  SBP_LAUNCH(cuda::column_finish_kernel<FPtr>, grid_for(m, kThreads), kThreads, 0, stream_,
             fptr(db), partial, m, blocks);
}

}  // namespace sbp
