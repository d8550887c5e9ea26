#pragma once
// A float tensor's data as a kernel sees it: a pointer and whether the storage is BF16. One
// kernel serves every F32/BF16 combination of its tensors by branching per load and store on a
// flag that is the same for every thread (no divergence), instead of one template
// instantiation per combination: attention backward has eight float tensors, 2^8 instances
// would cost minutes of nvcc time for no measurable speed.
#include <cstdint>

#include "backend/cuda/kernel_math.h"
#include "core/tensor.h"

namespace sbp::cuda {

struct FPtr {
  void* p = nullptr;
  bool bf16 = false;

  __device__ __forceinline__ float ld(int64_t i) const {
    return bf16 ? bf16_to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  // Rounds to nearest even once for BF16.
  __device__ __forceinline__ void st(int64_t i, float v) const {
    if (bf16)
      static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
    else
      static_cast<float*>(p)[i] = v;
  }
  // += in fp32, rounded once.
  __device__ __forceinline__ void add(int64_t i, float v) const { st(i, ld(i) + v); }
};

inline FPtr fptr(const Tensor& t) { return FPtr{t.data, t.dtype == DType::BF16}; }

// Grid size for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024) in a fixed tree:
// same inputs, same bits. Every thread gets the result. `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace sbp::cuda
