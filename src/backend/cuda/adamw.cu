// AdamW (torch.optim.AdamW's order, as the CPU backend): backend/adamw_math.h's adamw_update per
// element; param and grad F32 or BF16, m and v F32, a BF16 param rounded once per step.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {
__global__ void adamw_kernel(cuda::FPtr p, cuda::FPtr g, float* m, float* v, int64_t n,
                             AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float mi = m[i], vi = v[i];
    p.st(i, adamw_update(p.ld(i), g.ld(i), &mi, &vi, s));
    m[i] = mi;
    v[i] = vi;
  }
}
}  // namespace

void CudaBackend::adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m,
                                  const Tensor& v, const AdamWStep& s) {
  const int64_t n = param.numel();
  if (n == 0) return;
  const AdamWScalars sc =
      adamw_scalars(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step);
  SBP_LAUNCH(adamw_kernel, cuda::grid_for(n, 256), 256, 0, stream_,
             cuda::fptr(param), cuda::fptr(grad), m.f32(), v.f32(), n, sc);
}

}  // namespace sbp
