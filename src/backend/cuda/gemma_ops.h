#pragma once
// Kernels of Gemma's ops (backend.h: geglu_forward/backward, softcap_forward/backward); each
// CudaBackend::*_impl is one call of these on its stream. Their arithmetic is kernel_math.h's
// gelu_tanh / geglu_grad / softcap / softcap_grad_from_y (CPU-tested). The rmsnorm weight
// offset is a parameter of norm.cu's kernels.
#include <cuda_runtime.h>

#include "core/tensor.h"

namespace sbp::cuda {

void launch_geglu_forward(cudaStream_t s, const Tensor& out, const Tensor& gate, const Tensor& up);
void launch_geglu_backward(cudaStream_t s, const Tensor& dgate, const Tensor& dup,
                           const Tensor& dout, const Tensor& gate, const Tensor& up);
void launch_softcap_forward(cudaStream_t s, const Tensor& x, float cap);
void launch_softcap_backward(cudaStream_t s, const Tensor& dx, const Tensor& y, float cap);

}  // namespace sbp::cuda
