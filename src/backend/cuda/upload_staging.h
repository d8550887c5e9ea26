#pragma once
// Host-to-device copies that never make the host wait. cudaMemcpyAsync from pageable host memory
// "might be synchronous with respect to host" (CUDA runtime API, "API synchronization
// behavior"): the driver may wait for the stream before it stages the bytes, a stall in the
// middle of a step. So the backend copies the bytes into pinned staging itself (a host memcpy)
// and queues the copy from there, which is asynchronous.
//
// Staging is a few pinned chunks used front to back. A chunk is written again only once the
// stream has passed the copies out of it: after the backend's next host wait (stream_idle), or
// when the event recorded behind its last copy has completed. Until then new chunks are taken:
// staging grows to the bytes uploaded between two host waits (a step's index tensors and rows,
// a few MB at 100k tokens), and stays there. Copies larger than kMaxStaged (a weight at load
// time) go from pageable memory as they are.
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace sbp::cuda {

class UploadStaging {
 public:
  static constexpr size_t kChunkBytes = size_t{4} << 20;
  static constexpr size_t kMaxStaged = kChunkBytes;

  explicit UploadStaging(cudaStream_t stream) : stream_(stream) {}
  ~UploadStaging();
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;

  // host[0, bytes) to dst, queued on the stream; the caller may reuse host at once.
  void upload(void* dst, const void* host, size_t bytes);
  // The host has waited for the stream: every copy queued so far is done.
  void stream_idle();
  size_t staged_bytes() const;  // pinned memory held (for tests)

 private:
  struct Chunk {
    void* p = nullptr;
    size_t bytes = 0;
    size_t used = 0;
    cudaEvent_t done = nullptr;  // recorded behind its last copy when it stopped being current
    bool in_flight = false;
  };
  // A chunk with `bytes` free, made current; nullptr when pinned memory cannot be had.
  Chunk* take(size_t bytes);

  cudaStream_t stream_;
  std::vector<Chunk> chunks_;
  int current_ = -1;
};

}  // namespace sbp::cuda
