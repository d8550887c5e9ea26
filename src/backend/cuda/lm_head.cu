// LM head rows: log-softmax of the target, the in-place logits gradient (with and without the
// entropy term), the entropy, argmax. One block per row of the (n, V) block; row sums: each
// thread's terms in fp64, then fp32 in a fixed tree (device_ptr.cuh block_sum); per-logit
// arithmetic from kernel_math.h. Logits F32 or BF16; every output element is written once, so
// a BF16 gradient is rounded once.
#include <climits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {

using cuda::FPtr;
using cuda::fptr;

constexpr int kThreads = 256;

__global__ void logsoftmax_target_kernel(const unsigned* failed, float* lse, float* logp,
                                         FPtr logits, const int32_t* t, int64_t V) {
  if (*failed) return;  // a target is out of the vocabulary (checks.cu)
  __shared__ float sh[32];
  const int64_t base = blockIdx.x * V;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, logits.ld(base + j));
  mx = cuda::block_max(mx, sh);
  // Each thread's own terms in fp64, as the CPU's lanes: the thread that meets exp(0) = 1 would
  // otherwise drop every later tail term below half its ulp (V / 256 of them; the lse came out
  // 1.6e-5 low on a 100k-token tail, BackendOps.LogSoftmaxKeepsTheVocabularyTail). The tree
  // over the threads' sums stays fp32: no one of its 256 terms is negligible beside the others'.
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(logits.ld(base + j) - mx);
  const float log_sum = logf(cuda::block_sum(static_cast<float>(s), sh));
  if (threadIdx.x == 0) {
    const int32_t ti = t[blockIdx.x];
    lse[blockIdx.x] = mx + log_sum;
    // (z_t - max) - log_sum: as the CPU, without the rounded lse's lost low bits.
    logp[blockIdx.x] = ti >= 0 ? (logits.ld(base + ti) - mx) - log_sum : 0.0f;
  }
}

__global__ void dlogits_kernel(FPtr logits, const float* lse, const int32_t* t, const float* dlogp,
                               int64_t V) {
  const int64_t base = blockIdx.x * V;
  const int32_t ti = t[blockIdx.x];
  const float w = ti >= 0 ? dlogp[blockIdx.x] : 0.0f, l = lse[blockIdx.x];
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    logits.st(base + j, cuda::dlogits_value(logits.ld(base + j), l, w, j == ti));
}

__global__ void entropy_kernel(float* entropy, FPtr logits, const float* lse, int64_t V) {
  __shared__ float sh[32];
  const int64_t base = blockIdx.x * V;
  const float l = lse[blockIdx.x];
  double h = 0.0;  // fp64 per thread, as in logsoftmax_target_kernel
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) h += cuda::entropy_term(logits.ld(base + j), l);
  const float total = cuda::block_sum(static_cast<float>(h), sh);
  if (threadIdx.x == 0) entropy[blockIdx.x] = total;
}

__global__ void dlogits_entropy_kernel(FPtr logits, const float* lse, const int32_t* t,
                                       const float* dlogp, const float* entropy,
                                       const float* dentropy, int64_t V) {
  const int64_t base = blockIdx.x * V;
  const int32_t ti = t[blockIdx.x];
  const float w = ti >= 0 ? dlogp[blockIdx.x] : 0.0f, l = lse[blockIdx.x];
  const float H = entropy[blockIdx.x], e = dentropy[blockIdx.x];
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    logits.st(base + j, cuda::dlogits_entropy_value(logits.ld(base + j), l, w, H, e, j == ti));
}

// The first index of the largest value (ties: the smaller index wins), as the CPU.
__global__ void argmax_kernel(int32_t* out, FPtr logits, int64_t V) {
  __shared__ float sv[kThreads];
  __shared__ int64_t si[kThreads];
  const int64_t base = blockIdx.x * V;
  float best = -INFINITY;
  int64_t at = -1;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float z = logits.ld(base + j);
    if (at < 0 || z > best) {
      best = z;
      at = j;
    }
  }
  sv[threadIdx.x] = best;
  si[threadIdx.x] = at;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) {
      const float bv = sv[threadIdx.x + w];
      const int64_t bi = si[threadIdx.x + w];
      const int64_t ai = si[threadIdx.x];
      if (bi >= 0 && (ai < 0 || bv > sv[threadIdx.x] || (bv == sv[threadIdx.x] && bi < ai))) {
        sv[threadIdx.x] = bv;
        si[threadIdx.x] = bi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<int32_t>(si[0]);
}

void check_targets(CudaBackend& be, const Tensor& targets, int64_t V) {
  // Negative targets mean "no target".
  be.check_index_range(targets, INT32_MIN, V, [V](int64_t, int64_t v) {
    return "target id " + std::to_string(v) + " outside the vocabulary of " + std::to_string(V);
  });
}

}  // namespace

void CudaBackend::logsoftmax_target_impl(const Tensor& lse, const Tensor& logp,
                                         const Tensor& logits, const Tensor& targets) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(*this, targets, V);
  if (n == 0) return;
  SBP_LAUNCH(logsoftmax_target_kernel, static_cast<unsigned>(n), kThreads, 0, stream_,
             check_failed(), lse.f32(), logp.f32(), fptr(logits), targets.i32(), V);
}

void CudaBackend::dlogits_inplace_impl(const Tensor& logits, const Tensor& lse,
                                       const Tensor& targets, const Tensor& dlogp) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(*this, targets, V);
  if (n == 0) return;
  SBP_LAUNCH(dlogits_kernel, static_cast<unsigned>(n), kThreads, 0, stream_,
             fptr(logits), lse.f32(), targets.i32(), dlogp.f32(), V);
}

void CudaBackend::argmax_rows_impl(const Tensor& out, const Tensor& logits) {
  const int64_t n = logits.rows();
  if (n == 0) return;
  SBP_LAUNCH(argmax_kernel, static_cast<unsigned>(n), kThreads, 0, stream_,
             out.i32(), fptr(logits), logits.cols());
}

void CudaBackend::softmax_entropy_impl(const Tensor& entropy, const Tensor& logits,
                                       const Tensor& lse) {
  const int64_t n = logits.rows();
  if (n == 0) return;
  SBP_LAUNCH(entropy_kernel, static_cast<unsigned>(n), kThreads, 0, stream_,
             entropy.f32(), fptr(logits), lse.f32(), logits.cols());
}

void CudaBackend::dlogits_entropy_inplace_impl(const Tensor& logits, const Tensor& lse,
                                               const Tensor& targets, const Tensor& dlogp,
                                               const Tensor& entropy, const Tensor& dentropy) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(*this, targets, V);
  if (n == 0) return;
  SBP_LAUNCH(dlogits_entropy_kernel, static_cast<unsigned>(n), kThreads, 0, stream_,
             fptr(logits), lse.f32(), targets.i32(), dlogp.f32(), entropy.f32(), dentropy.f32(), V);
}

}  // namespace sbp
