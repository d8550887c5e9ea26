#pragma once
// Flash-style attention on the CPU (fp32): tiled, online softmax, never a T x T buffer.
// Semantics are those of Backend::attention_forward / attention_backward (backend/backend.h):
// causal within segments, optional sliding window, GQA, query offset. Both functions check
// their arguments as the Backend does (backend_checks.h), since they are called directly too
// (tests, tools/bench), and add the FLOPs they perform to *flops (multiply-adds count 2).
#include <cstdint>

#include "backend/backend.h"

namespace sbp::cpu {

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                       const AttentionDims& dims, int64_t* flops);

void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& seg_start, int64_t q_offset,
                        const AttentionDims& dims, int64_t* flops);

}  // namespace sbp::cpu
