// Attention forward and backward: our own kernels, not cuDNN's fused attention. Why:
//  - the contract's mask is per row: key j is visible to query i when
//    max(seg_start[i], i - window + 1) <= j <= i, with the queries a row range [q_offset,
//    q_offset + n) of a longer key stream (StreamBP's chunks). cuDNN's SDPA graph takes
//    per-sequence lengths/offsets (ragged tensors) and a causal or sliding-window mask aligned
//    at the sequence start, not arbitrary per-row segment starts plus a query offset into the
//    keys, so every chunk would need repacking into sequences;
//  - its backward sums dK/dV with atomics (non-deterministic), and the contract wants the same
//    bits for the same inputs;
//  - F32 and BF16 tensors in any mix (dK/dV accumulators are F32 while q is BF16).
// Two sets of kernels, both deterministic: attention_tc.cu on the tensor cores (WMMA, split
// TF32: fp32 results), for head_dim % 16 == 0 up to 256; attention_simt.cu on the fp32 CUDA
// cores, for the other head dims and whenever STREAMBP_CUDA_ATTENTION=simt (CudaBackend's
// constructor). This file checks the call and dispatches, phase by phase (forward; backward D,
// dQ, dK/dV): a tensor-core launch the device refuses (its shared-memory opt-in or the launch
// itself: cudaErrorInvalidValue, ...InvalidConfiguration, ...LaunchOutOfResources) runs the
// fp32 kernel of the same phase instead, printed ("gpu fallback: ...") and counted
// (CudaBackend::fallbacks). The attribute that chose the tensor-core kernels' shape promises
// that shared memory, but a driver, a kernel's static shared memory or its registers may still
// refuse: on the one GPU run we get, a refusal must cost speed, not the run.
#include "backend/cuda/attention_args.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"

#include <string>

namespace sbp {

namespace {

using cuda::AttnArgs;
using cuda::fptr;

AttnArgs args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seg_start,
              int64_t q_offset, const AttentionDims& dims) {
  AttnArgs a;
  a.q = fptr(q);
  a.k = fptr(k);
  a.v = fptr(v);
  a.seg = seg_start.i32();
  a.n = q.rows();
  a.q_offset = q_offset;
  a.window = dims.window;
  a.k_offset = dims.k_offset;
  a.H = static_cast<int>(dims.n_heads);
  a.G = static_cast<int>(dims.n_kv_heads);
  a.h = static_cast<int>(dims.head_dim);
  a.scale = dims.scale;
  return a;
}

// One phase: on the tensor cores when they are chosen and the device takes the launch, else on
// the fp32 CUDA cores.
void run_phase(CudaBackend& be, bool tensor_cores, size_t smem_limit, const AttnArgs& a,
               cuda::AttnPhase phase) {
  if (tensor_cores) {
    const cuda::TcRefusal r = cuda::tc_attention_run(a, phase, smem_limit, be.stream());
    if (!r) return;
    const std::string what = std::string("attention ") + cuda::phase_name(phase) + ": " +
                             r.kernel + " (head_dim " + std::to_string(a.h) + ", " +
                             std::to_string(a.H) + " heads, " + std::to_string(a.G) +
                             " kv heads, " + std::to_string(r.warps) + " warps, " +
                             std::to_string(r.smem) + " bytes of shared memory) refused: " +
                             cudaGetErrorName(r.error) + "; the fp32 kernels ran instead";
    be.note_fallback(what, " at " + std::to_string(a.n) + " query rows, keys to " +
                               std::to_string(a.q_offset + a.n));
  }
  cuda::simt_attention_run(a, phase, be.stream());
}

void check_head_dim(const char* op, const AttentionDims& dims) {
  // A capability of this backend (backend.h allows backends to compute less than the contract).
  SBP_CHECK(cuda::simt_attention_supported(static_cast<int>(dims.head_dim)) && dims.n_heads < 65536,
            std::string(op) +
                ": the CUDA attention kernels handle head_dim <= 256 and fewer "
                "than 65536 heads, not head_dim " +
                std::to_string(dims.head_dim));
}

}  // namespace

void CudaBackend::attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                         int64_t q_offset, const AttentionDims& dims) {
  check_head_dim("attention_forward", dims);
  const int64_t n = q.rows();
  // Q K^T and P V per visible pair, counted on the device (checks.cu).
  check_segments("attention_forward", seg_start, q_offset, n, dims.window,
                 4 * dims.head_dim * dims.n_heads);
  if (n == 0) return;
  AttnArgs a = args(q, k, v, seg_start, q_offset, dims);
  a.failed = check_failed();
  a.out = fptr(out);
  a.lse = lse.f32();
  run_phase(*this, use_tensor_core_attention(a.h), smem_optin_, a, cuda::AttnPhase::forward);
}

void CudaBackend::attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                          const Tensor& dout, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& out, const Tensor& lse,
                                          const Tensor& seg_start, int64_t q_offset,
                                          const AttentionDims& dims) {
  check_head_dim("attention_backward", dims);
  const int64_t n = q.rows();
  const bool d_from_p = out.dtype != DType::F32;
  // Per visible pair: dQ kernel S, dP, dQ; dK/dV kernel S, dP, dV, dK; with a BF16 out the
  // delta kernel's S and dP as well. Counted on the device (checks.cu).
  check_segments("attention_backward", seg_start, q_offset, n, dims.window,
                 (d_from_p ? 18 : 14) * dims.head_dim * dims.n_heads);
  if (n == 0) return;
  AttnArgs a = args(q, k, v, seg_start, q_offset, dims);
  a.failed = check_failed();
  a.out = fptr(out);
  a.dout = fptr(dout);
  a.dq = fptr(dq);
  a.dk = fptr(dk);
  a.dv = fptr(dv);
  a.lse = lse.f32();
  a.D = static_cast<float*>(scratch(kScratchA, sizeof(float) * n * a.H));
  // D from rowsum(dout * out) when out is the forward's F32 output; the kernels sum it from P
  // and dP themselves for a BF16 out (backend.h).
  if (!d_from_p) cuda::attention_delta_from_out(a, stream_);
  const bool tc = use_tensor_core_attention(a.h);
  if (d_from_p) run_phase(*this, tc, smem_optin_, a, cuda::AttnPhase::delta);
  run_phase(*this, tc, smem_optin_, a, cuda::AttnPhase::dq);
  run_phase(*this, tc, smem_optin_, a, cuda::AttnPhase::dkdv);
}

}  // namespace sbp
