// RMSNorm forward/backward over the last dimension (also per head for q/k-norm): one block per
// row, fp32 sums in a fixed tree; dg summed over rows in fp64 in a fixed order (reduce.cuh).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/reduce.cuh"

namespace sbp {

namespace {

using cuda::FPtr;
using cuda::fptr;

int row_threads(int64_t d) {
  const int64_t t = (d + 31) / 32 * 32;
  return static_cast<int>(t > 256 ? 256 : t);
}

// y, x (rows, d); g (d)
// w_off: the weight offset of Gemma's norms ((w_off + g) scales; 0 for Llama/Qwen).
__global__ void rmsnorm_forward_kernel(FPtr y, FPtr x, FPtr g, int64_t d, float eps, float w_off) {
  __shared__ float sh[32];
  const int64_t base = blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = x.ld(base + j);
    ss += v * v;
  }
  const float r = cuda::rms_rstd(cuda::block_sum(ss, sh), d, eps);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    y.st(base + j, (w_off + g.ld(j)) * (x.ld(base + j) * r));
}

// dx += r (dy g - xh mean); rstd[row] = r for the dg pass.
__global__ void rmsnorm_backward_rows_kernel(FPtr dx, float* rstd, FPtr dy, FPtr x, FPtr g,
                                             int64_t d, float eps, float w_off) {
  __shared__ float sh[32];
  const int64_t base = blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = x.ld(base + j);
    ss += v * v;
  }
  const float r = cuda::rms_rstd(cuda::block_sum(ss, sh), d, eps);
  float dot = 0.0f;  // sum_j dy_j g_j xh_j
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    dot += dy.ld(base + j) * (w_off + g.ld(j)) * (x.ld(base + j) * r);
  const float mean = cuda::block_sum(dot, sh) / static_cast<float>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    dx.add(base + j, cuda::rms_dx(r, dy.ld(base + j), w_off + g.ld(j), x.ld(base + j) * r, mean));
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

struct NormGradValue {  // dy_ij * xh_ij, xh = x r
  FPtr dy, x;
  const float* rstd;
  int64_t d;
  __device__ float operator()(int64_t i, int64_t j) const {
    return dy.ld(i * d + j) * (x.ld(i * d + j) * rstd[i]);
  }
};

}  // namespace

void CudaBackend::rmsnorm_forward_impl(const Tensor& y, const Tensor& x, const Tensor& g,
                                       float eps, float weight_offset) {
  const int64_t d = g.numel(), rows = x.numel() / d;
  if (rows == 0) return;
  // Rows go on grid x (up to 2^31 - 1 blocks): T * heads for q/k-norm fits.
  SBP_LAUNCH(rmsnorm_forward_kernel, static_cast<unsigned>(rows), row_threads(d), 0, stream_,
             fptr(y), fptr(x), fptr(g), d, eps, weight_offset);
}

void CudaBackend::rmsnorm_backward_impl(const Tensor& dx, const Tensor& dg, const Tensor& dy,
                                        const Tensor& x, const Tensor& g, float eps,
                                        float weight_offset) {
  const int64_t d = g.numel(), rows = x.numel() / d;
  if (rows == 0) return;
  auto* rstd = static_cast<float*>(scratch(kScratchA, sizeof(float) * rows));
  SBP_LAUNCH(rmsnorm_backward_rows_kernel, static_cast<unsigned>(rows), row_threads(d), 0, stream_,
             fptr(dx), rstd, fptr(dy), fptr(x), fptr(g), d, eps, weight_offset);
  const int blocks = static_cast<int>(std::min<int64_t>(cuda::kRowBlocks, rows));
  auto* partial = static_cast<double*>(scratch(kScratchRows, sizeof(double) * blocks * d));
  const dim3 grid(static_cast<unsigned>((d + 255) / 256), blocks);
  SBP_LAUNCH(cuda::column_partials_kernel<NormGradValue>, grid, 256, 0, stream_,
             partial, rows, d, blocks, NormGradValue{fptr(dy), fptr(x), rstd, d});
  SBP_LAUNCH(cuda::column_finish_kernel<FPtr>, cuda::grid_for(d, 256), 256, 0, stream_,
             fptr(dg), partial, d, blocks);
}

}  // namespace sbp
