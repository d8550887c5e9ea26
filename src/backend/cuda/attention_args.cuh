#pragma once
// What the attention kernels of attention.cu (fp32 CUDA cores) and attention_tc.cu (tensor
// cores) are given, and their launch helper. Layout: q, out, dq, dout (n, H*h); k, v, dk, dv
// (Tk, G*h), rows of global keys [k_offset, k_offset + Tk); lse, D (n, H) F32; seg
// (>= q_offset + n) I32. Query head hq reads kv head hq / (H / G). Keys below k_offset are
// seen by no query (backend.h): tiles that reach below it load zeros there and write nothing.
#include <cuda_runtime.h>  // nvcc's, or the emulation build's (emulation/cuda_runtime.h)

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/device_ptr.cuh"

namespace sbp::cuda {

struct AttnArgs {
  FPtr q, k, v, out, dout, dq, dk, dv;
  float* lse;
  float* D;  // (n, H) backward only
  const int32_t* seg;
  int64_t n, q_offset, window;
  int64_t k_offset = 0;  // global row of k's (and dk's) first row: key j is row j - k_offset
  int H, G, h;
  float scale;
  // Device word raised by a failed index check (checks.cu): every kernel returns at once, so bad
  // segment starts never steer a read outside K/V. nullptr: no check (the kernels' own tests).
  const unsigned* failed = nullptr;
};

// First statement of every attention kernel (uniform across the block: no barrier is skipped
// by only some threads).
#define SBP_ATTN_RETURN_IF_CHECK_FAILED(a) \
  if ((a).failed && *(a).failed) return

// `#pragma unroll` for nvcc; nothing for the emulation build (g++ would warn).
#if defined(STREAMBP_CUDA_EMULATION)
#define SBP_UNROLL
#else
#define SBP_UNROLL _Pragma("unroll")
#endif

// A kernel's dynamic shared memory, 128-byte aligned.
#if defined(STREAMBP_CUDA_EMULATION)
#define SBP_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::sbp::cudaemu::dynamic_shared())
#else
#define SBP_DYNAMIC_SHARED(T, name) extern __shared__ __align__(128) T name[]
#endif

template <class Kernel>
void launch_attention(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream,
                      const AttnArgs& a) {
  if (smem > 48 * 1024)  // past the default, shared memory must be asked for per kernel
    SBP_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  SBP_LAUNCH(kernel, grid, threads, smem, stream, a);
}

// ---- the fp32 CUDA-core kernels (attention_simt.cu) ----
bool simt_attention_supported(int h);  // head_dim <= 256
void simt_attention_forward(const AttnArgs& a, cudaStream_t stream);
// D = rowsum(dout * out) into a.D, for an F32 out (either kernel set's backward reads it).
void attention_delta_from_out(const AttnArgs& a, cudaStream_t stream);
// D from P and dP first when `d_from_p`, then dQ, then dK/dV.
void simt_attention_backward(const AttnArgs& a, bool d_from_p, cudaStream_t stream);

// ---- the tensor-core kernels (attention_tc.cu) ----
// Whether they run head_dim h within `smem_limit` bytes of shared memory per block (the
// device's opt-in limit): h % 16 == 0, h <= 256. Otherwise the fp32 kernels run.
bool tc_attention_supported(int h, size_t smem_limit);
void tc_attention_forward(const AttnArgs& a, size_t smem_limit, cudaStream_t stream);
// D first (from P and dP when `d_from_p`; else the caller has filled a.D), then dQ, then
// dK/dV.
void tc_attention_backward(const AttnArgs& a, bool d_from_p, size_t smem_limit,
                           cudaStream_t stream);

}  // namespace sbp::cuda
