#pragma once
// Fixed-order reductions (backend.h: same inputs => same bits, whatever the scheduling).
//  - column sums of an (n, m) matrix: the rows are cut into kRowBlocks contiguous ranges (a
//    function of n only); one thread per (column, range) sums its rows in order in fp64, then
//    one thread per column adds the ranges in order. No atomics on floats anywhere.
#include <cstdint>

#include "backend/cuda/device_ptr.cuh"

namespace sbp::cuda {

constexpr int kRowBlocks = 64;

__device__ __forceinline__ int64_t row_block_begin(int64_t n, int b, int blocks) {
  return n * b / blocks;
}

// partial (blocks, m) fp64: partial[b][j] = sum over rows of range b of value(i, j), in order.
template <class Value>
__global__ void column_partials_kernel(double* partial, int64_t n, int64_t m, int blocks,
                                       Value value) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int b = blockIdx.y;
  if (j >= m) return;
  double s = 0.0;
  const int64_t i1 = row_block_begin(n, b + 1, blocks);
  for (int64_t i = row_block_begin(n, b, blocks); i < i1; ++i) s += static_cast<double>(value(i, j));
  partial[b * m + j] = s;
}

// out[j] += sum_b partial[b][j] (one fp32 rounding, one BF16 rounding for a BF16 out).
// A template (on Out = FPtr) so that every file that launches it has its own instance: a plain
// __global__ defined in one .cu and launched from another would need relocatable device code.
template <class Out>
__global__ void column_finish_kernel(Out out, const double* partial, int64_t m, int blocks) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= m) return;
  double s = 0.0;
  for (int b = 0; b < blocks; ++b) s += partial[b * m + j];
  out.add(j, static_cast<float>(s));
}

}  // namespace sbp::cuda
