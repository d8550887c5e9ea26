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

// The same two functions compiled for AVX-512 (attention_avx512.cpp), in builds for a baseline
// instruction set without it (STREAMBP_ARCH, CMakeLists.txt): bit for bit the results above (every
// element's FMA chain is the same whatever the vector width), faster on a CPU with AVX-512.
// attention_dispatch.cpp chooses: they run only where the CPU has AVX-512 (attention_isa()).
#if defined(STREAMBP_ATTENTION_AVX512_VARIANT)
namespace avx512 {
decltype(cpu::attention_forward) attention_forward;
decltype(cpu::attention_backward) attention_backward;
}  // namespace avx512
#endif

// Which attention kernels this process runs: "avx512" (the variant above, or a build for a
// machine with AVX-512) or "base" (the build's own instruction set). STREAMBP_ATTENTION_ISA=base
// forces the base kernels (to compare the two; scripts/build-wheel.sh --check does).
const char* attention_isa();

}  // namespace sbp::cpu
