// The CUDA backend's host offload (backend.h "host offload"): pinned host blocks, and copies on
// a stream of their own ordered with the compute stream by events, so that a layer checkpoint
// moves over the bus while the next layer computes.
//
//   queue:  compute --record ev_c--> copy stream waits ev_c, cudaMemcpyAsync, records ev_t
//   wait:   compute stream waits ev_t (the host never waits)
//
// The copy stream is first in, first out, so waiting for a ticket's event orders after every
// copy before it too, and a host block released after its wait and handed out again is written
// by a later copy only after the earlier one read it. A released device block is reused by
// work on the compute stream, which waited for the copy.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/pinned_host_space.h"

namespace sbp {

PinnedHostSpace::~PinnedHostSpace() {
  for (auto& [bytes, p] : cached_) cudaFreeHost(p);
}

void* PinnedHostSpace::allocate_bytes(size_t bytes) {
  auto it = cached_.find(bytes);
  if (it != cached_.end()) {
    void* p = it->second;
    cached_.erase(it);
    return p;
  }
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky
    return nullptr;
  }
  if (e != cudaSuccess) cuda::fail_cuda(e, "cudaMallocHost", __FILE__, __LINE__);
  return p;
}

void PinnedHostSpace::release_bytes(void* p, size_t bytes) { cached_.emplace(bytes, p); }

MemorySpace& CudaBackend::host_memory_impl() { return *host_; }

void CudaBackend::copy_async_impl(void* dst, const void* src, size_t bytes, bool to_host,
                                  CopyTicket ticket) {
  if (!copy_stream_) SBP_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  const cudaEvent_t after = take_event();
  SBP_CUDA(cudaEventRecord(after, stream_));
  SBP_CUDA(cudaStreamWaitEvent(copy_stream_, after, 0));
  free_events_.push_back(after);  // its wait is queued: it may be recorded again
  SBP_CUDA(cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                           copy_stream_));
  const cudaEvent_t done = take_event();
  SBP_CUDA(cudaEventRecord(done, copy_stream_));
  copy_events_.emplace_back(ticket, done);
}

void CudaBackend::wait_copy_impl(CopyTicket ticket) {
  // The last copy at or before the ticket: the stream is FIFO, so its event covers the others.
  cudaEvent_t last = nullptr;
  while (!copy_events_.empty() && copy_events_.front().first <= ticket) {
    if (last) free_events_.push_back(last);
    last = copy_events_.front().second;
    copy_events_.pop_front();
  }
  if (!last) return;
  SBP_CUDA(cudaStreamWaitEvent(stream_, last, 0));
  free_events_.push_back(last);
}

cudaEvent_t CudaBackend::take_event() {
  if (!free_events_.empty()) {
    const cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  SBP_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void CudaBackend::destroy_copy_resources() {
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (auto& [t, e] : copy_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  copy_events_.clear();
  free_events_.clear();
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  copy_stream_ = nullptr;
}

}  // namespace sbp
