#pragma once
// The argument checks of Backend::attention_forward / attention_backward (backend.cpp), for the
// one other entry point to an implementation: the CPU attention kernels (cpu/attention.h) are
// also called directly, by their own tests and by tools/bench, and must reject what the
// Backend rejects, with the same messages.
#include <cstdint>

#include "backend/backend.h"

namespace sbp {

void check_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                             const AttentionDims& dims);
void check_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& seg_start,
                              int64_t q_offset, const AttentionDims& dims);

}  // namespace sbp
