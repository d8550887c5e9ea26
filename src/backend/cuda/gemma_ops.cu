// GeGLU and logit soft-capping (gemma_ops.h): elementwise, F32 or BF16 storage, fp32 math.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/gemma_ops.h"
#include "backend/cuda/cuda_backend.h"

namespace sbp::cuda {

namespace {

#define SBP_GRID_STRIDE(i, n)                                                   \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void geglu_forward_kernel(FPtr out, FPtr gate, FPtr up, int64_t n) {
  SBP_GRID_STRIDE(i, n) out.st(i, gelu_tanh(gate.ld(i)) * up.ld(i));
}
__global__ void geglu_backward_kernel(FPtr dgate, FPtr dup, FPtr dout, FPtr gate, FPtr up,
                                      int64_t n) {
  SBP_GRID_STRIDE(i, n) {
    const Pair g = geglu_grad(dout.ld(i), gate.ld(i), up.ld(i));
    dgate.add(i, g.a);
    dup.add(i, g.b);
  }
}
__global__ void softcap_forward_kernel(FPtr x, int64_t n, float cap) {
  SBP_GRID_STRIDE(i, n) x.st(i, softcap(x.ld(i), cap));
}
__global__ void softcap_backward_kernel(FPtr dx, FPtr y, int64_t n, float cap) {
  SBP_GRID_STRIDE(i, n) dx.st(i, softcap_grad_from_y(dx.ld(i), y.ld(i), cap));
}

}  // namespace

void launch_geglu_forward(cudaStream_t s, const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t n = out.numel();
  if (n == 0) return;
  SBP_LAUNCH(geglu_forward_kernel, grid_for(n, 256), 256, 0, s, fptr(out), fptr(gate), fptr(up), n);
}

void launch_geglu_backward(cudaStream_t s, const Tensor& dgate, const Tensor& dup,
                           const Tensor& dout, const Tensor& gate, const Tensor& up) {
  const int64_t n = dout.numel();
  if (n == 0) return;
  SBP_LAUNCH(geglu_backward_kernel, grid_for(n, 256), 256, 0, s,
             fptr(dgate), fptr(dup), fptr(dout), fptr(gate), fptr(up), n);
}

void launch_softcap_forward(cudaStream_t s, const Tensor& x, float cap) {
  const int64_t n = x.numel();
  if (n == 0) return;
  SBP_LAUNCH(softcap_forward_kernel, grid_for(n, 256), 256, 0, s, fptr(x), n, cap);
}

void launch_softcap_backward(cudaStream_t s, const Tensor& dx, const Tensor& y, float cap) {
  const int64_t n = dx.numel();
  if (n == 0) return;
  SBP_LAUNCH(softcap_backward_kernel, grid_for(n, 256), 256, 0, s, fptr(dx), fptr(y), n, cap);
}

}  // namespace sbp::cuda

namespace sbp {

void CudaBackend::geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  cuda::launch_geglu_forward(stream_, out, gate, up);
}

void CudaBackend::geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                      const Tensor& gate, const Tensor& up) {
  cuda::launch_geglu_backward(stream_, dgate, dup, dout, gate, up);
}

void CudaBackend::softcap_forward_impl(const Tensor& x, float cap) {
  cuda::launch_softcap_forward(stream_, x, cap);
}

void CudaBackend::softcap_backward_impl(const Tensor& dx, const Tensor& y, float cap) {
  cuda::launch_softcap_backward(stream_, dx, y, cap);
}

}  // namespace sbp
