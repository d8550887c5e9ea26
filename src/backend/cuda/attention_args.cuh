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

// Whether a launch's error is the device refusing this configuration (more shared memory than
// it grants, too many resources for the block): nothing ran and another kernel may. A fault of
// an earlier kernel (sticky) is not.
inline bool is_launch_refusal(cudaError_t e) {
  return e == cudaErrorInvalidValue || e == cudaErrorInvalidConfiguration ||
         e == cudaErrorLaunchOutOfResources;
}

// launch_attention for a kernel that has a second way: a refusal (the shared-memory opt-in or
// the launch) is returned, and cleared, instead of thrown; anything else throws. `name` names the
// kernel (in error messages and the emulation's refusals).
template <class Kernel>
cudaError_t try_launch_attention(Kernel kernel, const char* name, dim3 grid, int threads,
                                 size_t smem, cudaStream_t stream, const AttnArgs& a) {
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) {
      cudaGetLastError();
      if (is_launch_refusal(e)) return e;
      fail_cuda(e, "cudaFuncSetAttribute", __FILE__, __LINE__);
    }
  }
#if defined(STREAMBP_CUDA_EMULATION)
  ::sbp::cudaemu::launch(name, kernel, grid, threads, smem, stream, a);
#else
  kernel<<<grid, threads, smem, stream>>>(a);
#endif
  last_kernel() = name;
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    if (is_launch_refusal(e)) return e;
    fail_cuda(e, name, __FILE__, __LINE__);
  }
  if (launch_blocking()) SBP_CUDA(cudaDeviceSynchronize());
  return cudaSuccess;
}

// The launches of one attention call: the forward; the backward's D from P and dP (a BF16 out),
// dQ, then dK/dV.
enum class AttnPhase { forward, delta, dq, dkdv };
inline const char* phase_name(AttnPhase p) {
  switch (p) {
    case AttnPhase::forward: return "forward";
    case AttnPhase::delta: return "backward D";
    case AttnPhase::dq: return "backward dQ";
    case AttnPhase::dkdv: return "backward dK/dV";
  }
  return "?";
}

// ---- the fp32 CUDA-core kernels (attention_simt.cu) ----
bool simt_attention_supported(int h);  // head_dim <= 256
// One phase; a refusal throws (no third way).
void simt_attention_run(const AttnArgs& a, AttnPhase phase, cudaStream_t stream);
void simt_attention_forward(const AttnArgs& a, cudaStream_t stream);
// D = rowsum(dout * out) into a.D, for an F32 out (either kernel set's backward reads it).
void attention_delta_from_out(const AttnArgs& a, cudaStream_t stream);
// D from P and dP first when `d_from_p`, then dQ, then dK/dV.
void simt_attention_backward(const AttnArgs& a, bool d_from_p, cudaStream_t stream);

// ---- the tensor-core kernels (attention_tc.cu) ----
// Whether they run head_dim h within `smem_limit` bytes of shared memory per block (the
// device's opt-in limit): h % 16 == 0, h <= 256. Otherwise the fp32 kernels run.
bool tc_attention_supported(int h, size_t smem_limit);
// A launch the device refused, with what it asked for; error == cudaSuccess: it launched.
struct TcRefusal {
  cudaError_t error = cudaSuccess;
  const char* kernel = nullptr;
  int warps = 0;
  size_t smem = 0;
  explicit operator bool() const { return error != cudaSuccess; }
};
// One phase on the tensor cores; a refusal launches nothing (attention.cu then runs the fp32
// kernel of the same phase).
TcRefusal tc_attention_run(const AttnArgs& a, AttnPhase phase, size_t smem_limit,
                           cudaStream_t stream);
// The phases in order (the kernels' own tests); a refusal throws.
void tc_attention_forward(const AttnArgs& a, size_t smem_limit, cudaStream_t stream);
// D first (from P and dP when `d_from_p`; else the caller has filled a.D), then dQ, then
// dK/dV.
void tc_attention_backward(const AttnArgs& a, bool d_from_p, size_t smem_limit,
                           cudaStream_t stream);

}  // namespace sbp::cuda
