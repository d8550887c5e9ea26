// CpuBackend's attention entry points: the flash-style kernels of attention.cpp, in their AVX-512
// compilation where the build has one and the CPU can run it (attention.h).
#include <cstdlib>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_backend.h"

namespace sbp {
namespace cpu {

namespace {
#if defined(STREAMBP_ATTENTION_AVX512_VARIANT)
bool choose_avx512() {
  const char* isa = std::getenv("STREAMBP_ATTENTION_ISA");
  if (isa != nullptr && std::strcmp(isa, "base") == 0) return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}
// Decided once per process: the CPU does not change, and the environment is read at first use.
bool use_avx512() {
  static const bool yes = choose_avx512();
  return yes;
}
#endif
}  // namespace

const char* attention_isa() {
#if defined(STREAMBP_ATTENTION_AVX512_VARIANT)
  return use_avx512() ? "avx512" : "base";
#elif defined(__AVX512F__)
  return "avx512";
#else
  return "base";
#endif
}

}  // namespace cpu

void CpuBackend::attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q,
                                        const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                        int64_t q_offset, const AttentionDims& dims) {
#if defined(STREAMBP_ATTENTION_AVX512_VARIANT)
  if (cpu::use_avx512()) {
    cpu::avx512::attention_forward(out, lse, q, k, v, seg_start, q_offset, dims, &flops_);
    return;
  }
#endif
  cpu::attention_forward(out, lse, q, k, v, seg_start, q_offset, dims, &flops_);
}

void CpuBackend::attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                         const Tensor& dout, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const Tensor& seg_start, int64_t q_offset,
                                         const AttentionDims& dims) {
#if defined(STREAMBP_ATTENTION_AVX512_VARIANT)
  if (cpu::use_avx512()) {
    cpu::avx512::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seg_start, q_offset,
                                    dims, &flops_);
    return;
  }
#endif
  cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seg_start, q_offset, dims, &flops_);
}

}  // namespace sbp
