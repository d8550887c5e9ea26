// The contents of index tensors, checked on the device before a kernel indexes with them
// (backend.h: "each computing backend checks them in its kernels, before any parallel loop"),
// without stopping the GPU.
//
// How: a small kernel scans the tensor and records the first bad index (atomicMin: the result
// does not depend on the order threads run in) in one of the backend's check records in device
// memory, and raises the device-wide `failed` word; a one-thread kernel then records the value
// at that index. Kernels that index with checked tensors (embedding, rope, the LM head, the
// attention kernels) return at once when `failed` is raised, so a bad id never reads outside a
// buffer. The host reads the records once, together with its next download or synchronisation
// (flush_checks below): no synchronisation of its own, and still the CPU backend's one-line
// message naming the tensor, the index and the value of the first bad entry of the first failed
// check. The segment check also counts the visible (query, key) pairs on the device, for the
// FLOP count, which reaches flops() at the same read.
#include <climits>
#include <cstddef>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {

using cuda::CheckState;

__global__ void check_range_kernel(CheckState* st, int slot, const int32_t* v, int64_t n,
                                   int64_t lo, int64_t hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    if (v[i] < lo || v[i] >= hi) {
      atomicMin(&st->rec[slot].first_bad, static_cast<unsigned long long>(i));
      atomicExch(&st->failed, 1u);
    }
}

// Rows r in [q_offset, q_offset + n). Visible pairs times flops_per_pair go to st->flops.
__global__ void check_segments_kernel(CheckState* st, int slot, const int32_t* seg,
                                      int64_t q_offset, int64_t n, int64_t window,
                                      unsigned long long flops_per_pair) {
  unsigned long long pairs = 0;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = q_offset + k;
    const int64_t s = seg[r];
    const int64_t prev = k == 0 ? 0 : seg[r - 1];
    if (!cuda::seg_start_ok(s, r, prev, k == 0)) {
      atomicMin(&st->rec[slot].first_bad, static_cast<unsigned long long>(r));
      atomicExch(&st->failed, 1u);
    } else {
      pairs += static_cast<unsigned long long>(r - cuda::first_key(s, r, window) + 1);
    }
  }
  // Integer sums: exact whatever the order.
  if (pairs) atomicAdd(&st->flops, pairs * flops_per_pair);
}

// The value at the record's first bad index, read before later kernels may overwrite it.
__global__ void record_value_kernel(CheckState* st, int slot, const int32_t* v) {
  cuda::CheckRecord& r = st->rec[slot];
  if (r.first_bad != ULLONG_MAX) r.value = v[r.first_bad];
}

}  // namespace

int CudaBackend::open_check(std::function<std::string(int64_t, int64_t)> message) {
  if (checks_pending_.size() == static_cast<size_t>(cuda::kCheckRecords)) {
    // Every record is in use (many checked calls without a download): read them now.
    synchronize_impl();
  }
  const int slot = static_cast<int>(checks_pending_.size());
  checks_pending_.push_back(std::move(message));
  const cuda::CheckRecord init{ULLONG_MAX, 0};
  upload_async(&checks_->rec[slot], &init, sizeof init);
  return slot;
}

void CudaBackend::check_index_range(const Tensor& t, int64_t lo, int64_t hi,
                                    std::function<std::string(int64_t, int64_t)> message) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const int slot = open_check(std::move(message));
  SBP_LAUNCH(check_range_kernel, cuda::grid_for(n, 256), 256, 0, stream_, checks_, slot, t.i32(),
             n, lo, hi);
  SBP_LAUNCH(record_value_kernel, 1, 32, 0, stream_, checks_, slot, t.i32());
}

void CudaBackend::check_segments(const char* op, const Tensor& seg_start, int64_t q_offset,
                                 int64_t n, int64_t window, int64_t flops_per_pair) {
  if (n == 0) return;
  const std::string name(op);
  const int slot = open_check([name](int64_t row, int64_t s) {
    return name + ": seg_start[" + std::to_string(row) + "] = " + std::to_string(s) +
           " must satisfy 0 <= seg_start[i] <= i and be non-decreasing";
  });
  SBP_LAUNCH(check_segments_kernel, cuda::grid_for(n, 256), 256, 0, stream_, checks_, slot,
             seg_start.i32(), q_offset, n, window,
             static_cast<unsigned long long>(flops_per_pair));
  SBP_LAUNCH(record_value_kernel, 1, 32, 0, stream_, checks_, slot, seg_start.i32());
}

void CudaBackend::queue_check_readback() {
  if (checks_pending_.empty()) return;
  const size_t bytes = offsetof(CheckState, rec) + sizeof(cuda::CheckRecord) * checks_pending_.size();
  SBP_CUDA(cudaMemcpyAsync(pinned_, checks_, bytes, cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::flush_checks() {
  if (checks_pending_.empty()) return;
  const auto* host = static_cast<const CheckState*>(pinned_);
  flops_ += static_cast<int64_t>(host->flops);
  std::string error;
  for (size_t k = 0; k < checks_pending_.size() && error.empty(); ++k) {
    const cuda::CheckRecord& r = host->rec[k];
    if (r.first_bad != ULLONG_MAX)
      error = checks_pending_[k](static_cast<int64_t>(r.first_bad), static_cast<int64_t>(r.value));
  }
  const bool failed = host->failed != 0;
  checks_pending_.clear();
  // The header back to zero for the next checks (queued: ordered before any later kernel).
  const CheckState zero{};
  upload_async(checks_, &zero, offsetof(CheckState, rec));
  SBP_CHECK(!failed || !error.empty(), "cuda: a device-side index check failed without a record");
  SBP_CHECK(error.empty(), error);
}

}  // namespace sbp
