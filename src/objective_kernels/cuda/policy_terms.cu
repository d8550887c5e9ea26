// The policy-gradient objectives' per-token gradients on the CUDA backend (policy_token_grads
// and value_token_grads of objective_kernels.h): one thread per row of a head block, the
// objectives' own formulas (objective/policy_terms.h, SBP_HD) in fp64, on the backend's stream.
// Compiled into the CUDA library (CMakeLists.txt), which is why it may see backend/cuda/
// (cmake/layers.cmake's exceptions).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"
#include "objective_kernels/kernel_table.h"

namespace sbp {

namespace {

constexpr int kThreads = 256;

__global__ void policy_token_grads_kernel(float* dlogp, float* dentropy, const float* logp,
                                          const float* rows, const float* ref, int64_t n,
                                          PolicyTerms terms) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const PolicyGrad g =
      policy_token_grad(logp[i], rows + i * kPolicyRowWidth, terms, ref ? ref + i : nullptr);
  dlogp[i] = g.dlogp;
  if (dentropy) dentropy[i] = g.dentropy;
}

__global__ void value_token_grads_kernel(float* dvalue, const float* value, const float* rows,
                                         int64_t n, ValueTerms terms) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  dvalue[i] = value_token_grad(value[i], rows + i * kValueRowWidth, terms);
}

}  // namespace

void cuda_policy_token_grads(Backend& be, const Tensor& dlogp, const Tensor& dentropy,
                             const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                             const Tensor& ref) {
  const int64_t n = logp.numel();
  if (n == 0) return;
  SBP_LAUNCH(policy_token_grads_kernel, cuda::grid_for(n, kThreads), kThreads, 0,
             static_cast<CudaBackend&>(be).stream(), dlogp.f32(),
             dentropy.defined() ? dentropy.f32() : nullptr, logp.f32(), rows.f32(),
             ref.defined() ? ref.f32() : nullptr, n, terms);
}

void cuda_value_token_grads(Backend& be, const Tensor& dvalue, const Tensor& value,
                            const Tensor& rows, const ValueTerms& terms) {
  const int64_t n = value.numel();
  if (n == 0) return;
  SBP_LAUNCH(value_token_grads_kernel, cuda::grid_for(n, kThreads), kThreads, 0,
             static_cast<CudaBackend&>(be).stream(), dvalue.f32(), value.f32(), rows.f32(), n,
             terms);
}

}  // namespace sbp
