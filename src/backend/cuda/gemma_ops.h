#pragma once
// Kernels for the ops the Gemma branch adds to backend.h (geglu_forward/backward,
// softcap_forward/backward), ready before that merge: once backend.h has them, each
// CudaBackend::*_impl is one call of these with (stream(), tensors...). Their arithmetic is
// kernel_math.h's gelu_tanh / geglu_grad / softcap / softcap_grad_from_y (CPU-tested).
// The rmsnorm weight offset is already a parameter of norm.cu's kernels (0 until the merge).
#include <cuda_runtime.h>

#include "core/tensor.h"

namespace sbp::cuda {

void launch_geglu_forward(cudaStream_t s, const Tensor& out, const Tensor& gate, const Tensor& up);
void launch_geglu_backward(cudaStream_t s, const Tensor& dgate, const Tensor& dup,
                           const Tensor& dout, const Tensor& gate, const Tensor& up);
void launch_softcap_forward(cudaStream_t s, const Tensor& x, float cap);
void launch_softcap_backward(cudaStream_t s, const Tensor& dx, const Tensor& y, float cap);

}  // namespace sbp::cuda
