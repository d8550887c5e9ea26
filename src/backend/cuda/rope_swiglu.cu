// Rotary embedding (table, forward, inverse) and SwiGLU: elementwise kernels whose arithmetic is
// kernel_math.h's rope_rotate / swiglu / swiglu_grad.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {

using cuda::FPtr;
using cuda::fptr;
using cuda::grid_for;

#define SBP_GRID_STRIDE(i, n)                                                   \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// table (P, h): [s cos | s sin] of p * inv_freq at p = p0 + row, the angle rounded to fp32
// first (as transformers and the CPU backend compute it), cos and sin in fp64 rounded to fp32,
// then the fp32 product with the attention factor s (yarn; 1 otherwise).
__global__ void rope_table_kernel(float* table, const float* inv_freq, int64_t P, int64_t half,
                                  float s, int64_t p0) {
  SBP_GRID_STRIDE(e, P * half) {
    const int64_t r = e / half, i = e % half;
    const float angle = static_cast<float>(p0 + r) * inv_freq[i];
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float sn = static_cast<float>(sin(static_cast<double>(angle)));
    table[r * 2 * half + i] = c * s;
    table[r * 2 * half + half + i] = sn * s;
  }
}

// x (n, heads * h) in place; one thread per rotated pair.
__global__ void rope_apply_kernel(const unsigned* failed, FPtr x, const int32_t* pos,
                                  const float* table, int64_t n, int64_t heads, int64_t h,
                                  float sign) {
  if (*failed) return;  // a position is out of the table (checks.cu)
  const int64_t half = h / 2;
  SBP_GRID_STRIDE(e, n * heads * half) {
    const int64_t j = e % half, hd = (e / half) % heads, i = e / (half * heads);
    const float* row = table + static_cast<int64_t>(pos[i]) * h;
    const int64_t a_at = i * heads * h + hd * h + j;
    const cuda::Pair r = cuda::rope_rotate(x.ld(a_at), x.ld(a_at + half), row[j], row[half + j], sign);
    x.st(a_at, r.a);
    x.st(a_at + half, r.b);
  }
}

__global__ void swiglu_forward_kernel(FPtr out, FPtr gate, FPtr up, int64_t n) {
  SBP_GRID_STRIDE(i, n) out.st(i, cuda::swiglu(gate.ld(i), up.ld(i)));
}

__global__ void swiglu_backward_kernel(FPtr dgate, FPtr dup, FPtr dout, FPtr gate, FPtr up,
                                       int64_t n) {
  SBP_GRID_STRIDE(i, n) {
    const cuda::Pair g = cuda::swiglu_grad(dout.ld(i), gate.ld(i), up.ld(i));
    dgate.add(i, g.a);
    dup.add(i, g.b);
  }
}

}  // namespace

void CudaBackend::rope_table_impl(const Tensor& table, std::span<const float> inv_freq,
                                  float attention_factor, int64_t first_position) {
  const int64_t P = table.rows(), half = table.cols() / 2;
  if (P == 0) return;
  auto* f = static_cast<float*>(scratch(kScratchA, sizeof(float) * half));
  upload_async(f, inv_freq.data(), sizeof(float) * half);  // staged: no wait
  SBP_LAUNCH(rope_table_kernel, grid_for(P * half, 256), 256, 0, stream_, table.f32(), f, P, half,
             attention_factor, first_position);
}

namespace {
void rope_apply(CudaBackend& be, const Tensor& x, const Tensor& positions, const Tensor& table,
                float sign) {
  const int64_t n = x.rows(), P = table.rows(), h = table.cols();
  be.check_index_range(positions, 0, P, [P](int64_t, int64_t v) {
    return "rope: position " + std::to_string(v) + " outside the table of " + std::to_string(P);
  });
  const int64_t heads = x.cols() / h;
  const int64_t work = n * heads * (h / 2);
  if (work == 0) return;
  SBP_LAUNCH(rope_apply_kernel, grid_for(work, 256), 256, 0, be.stream(), be.check_failed(),
             fptr(x), positions.i32(), table.f32(), n, heads, h, sign);
}
}  // namespace

void CudaBackend::rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& table) {
  rope_apply(*this, x, positions, table, 1.0f);
}

void CudaBackend::rope_backward_impl(const Tensor& dx, const Tensor& positions,
                                     const Tensor& table) {
  rope_apply(*this, dx, positions, table, -1.0f);
}

void CudaBackend::swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t n = out.numel();
  if (n == 0) return;
  SBP_LAUNCH(swiglu_forward_kernel, grid_for(n, 256), 256, 0, stream_,
             fptr(out), fptr(gate), fptr(up), n);
}

void CudaBackend::swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                       const Tensor& gate, const Tensor& up) {
  const int64_t n = dout.numel();
  if (n == 0) return;
  SBP_LAUNCH(swiglu_backward_kernel, grid_for(n, 256), 256, 0, stream_,
             fptr(dgate), fptr(dup), fptr(dout), fptr(gate), fptr(up), n);
}

}  // namespace sbp
