// The contents of index tensors, checked on the device before a kernel indexes with them
// (backend.h: "each computing backend checks them in its kernels, before any parallel loop").
//
// How: one small kernel scans the tensor and writes the first bad index (atomicMin: the result
// does not depend on the order threads run in) into a device word, which is copied to pinned
// host memory; the stream is synchronised and the host throws the CPU backend's message. One
// synchronisation per checked call: the price of reporting a bad token id as an error instead
// of reading outside a buffer. (A host copy of the whole index tensor would do the same with
// more traffic; embedding_backward does copy its ids, since it sorts them on the host anyway.)
#include <climits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {

struct CheckResult {
  unsigned long long first_bad;  // ULLONG_MAX: none
  unsigned long long pairs;      // visible (query, key) pairs (segments check)
};

__global__ void check_range_kernel(CheckResult* r, const int32_t* v, int64_t n, int64_t lo,
                                   int64_t hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    if (v[i] < lo || v[i] >= hi) atomicMin(&r->first_bad, static_cast<unsigned long long>(i));
}

// Rows r in [q_offset, q_offset + n).
__global__ void check_segments_kernel(CheckResult* res, const int32_t* seg, int64_t q_offset,
                                      int64_t n, int64_t window) {
  unsigned long long pairs = 0;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = q_offset + k;
    const int64_t s = seg[r];
    const int64_t prev = k == 0 ? 0 : seg[r - 1];
    if (!cuda::seg_start_ok(s, r, prev, k == 0)) {
      atomicMin(&res->first_bad, static_cast<unsigned long long>(r));
    } else {
      pairs += static_cast<unsigned long long>(r - cuda::first_key(s, r, window) + 1);
    }
  }
  // Integer sums: exact whatever the order.
  if (pairs) atomicAdd(&res->pairs, pairs);
}

}  // namespace

void CudaBackend::check_index_range(const Tensor& t, int64_t lo, int64_t hi,
                                    const std::function<std::string(int64_t, int64_t)>& message) {
  const int64_t n = t.numel();
  if (n == 0) return;
  auto* r = static_cast<CheckResult*>(scratch(kScratchIndex, sizeof(CheckResult)));
  const CheckResult init{ULLONG_MAX, 0};
  SBP_CUDA(cudaMemcpyAsync(r, &init, sizeof init, cudaMemcpyHostToDevice, stream_));
  SBP_LAUNCH(check_range_kernel, cuda::grid_for(n, 256), 256, 0, stream_, r, t.i32(), n, lo, hi);
  auto* host = static_cast<CheckResult*>(pinned_);
  SBP_CUDA(cudaMemcpyAsync(host, r, sizeof *host, cudaMemcpyDeviceToHost, stream_));
  SBP_CUDA(cudaStreamSynchronize(stream_));
  if (host->first_bad == ULLONG_MAX) return;
  const int64_t i = static_cast<int64_t>(host->first_bad);
  int32_t value = 0;
  SBP_CUDA(cudaMemcpyAsync(&value, t.i32() + i, 4, cudaMemcpyDeviceToHost, stream_));
  SBP_CUDA(cudaStreamSynchronize(stream_));
  SBP_CHECK(false, message(i, value));
}

int64_t CudaBackend::check_segments(const char* op, const Tensor& seg_start, int64_t q_offset,
                                    int64_t n, int64_t window) {
  if (n == 0) return 0;
  auto* r = static_cast<CheckResult*>(scratch(kScratchIndex, sizeof(CheckResult)));
  const CheckResult init{ULLONG_MAX, 0};
  SBP_CUDA(cudaMemcpyAsync(r, &init, sizeof init, cudaMemcpyHostToDevice, stream_));
  SBP_LAUNCH(check_segments_kernel, cuda::grid_for(n, 256), 256, 0, stream_,
             r, seg_start.i32(), q_offset, n, window);
  auto* host = static_cast<CheckResult*>(pinned_);
  SBP_CUDA(cudaMemcpyAsync(host, r, sizeof *host, cudaMemcpyDeviceToHost, stream_));
  SBP_CUDA(cudaStreamSynchronize(stream_));
  if (host->first_bad != ULLONG_MAX) {
    const int64_t row = static_cast<int64_t>(host->first_bad);
    int32_t s = 0;
    SBP_CUDA(cudaMemcpyAsync(&s, seg_start.i32() + row, 4, cudaMemcpyDeviceToHost, stream_));
    SBP_CUDA(cudaStreamSynchronize(stream_));
    SBP_CHECK(false, std::string(op) + ": seg_start[" + std::to_string(row) + "] = " +
                         std::to_string(s) +
                         " must satisfy 0 <= seg_start[i] <= i and be non-decreasing");
  }
  return static_cast<int64_t>(host->pairs);
}

}  // namespace sbp
