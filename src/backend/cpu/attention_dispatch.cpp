// CpuBackend's attention entry points: the flash-style kernels of attention.cpp.
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_backend.h"

namespace sbp {

void CpuBackend::attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q,
                                        const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                        int64_t q_offset, const AttentionDims& dims) {
  cpu::attention_forward(out, lse, q, k, v, seg_start, q_offset, dims, &flops_);
}

void CpuBackend::attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                         const Tensor& dout, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const Tensor& seg_start, int64_t q_offset,
                                         const AttentionDims& dims) {
  cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seg_start, q_offset, dims, &flops_);
}

}  // namespace sbp
