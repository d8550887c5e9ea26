// UploadStaging (upload_staging.h).
#include "backend/cuda/upload_staging.h"

#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace sbp::cuda {

namespace {
constexpr size_t kAlign = 256;  // every copy's source as aligned as cudaMalloc's memory
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

UploadStaging::~UploadStaging() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (Chunk& c : chunks_) {
    if (c.done) cudaEventDestroy(c.done);
    cudaFreeHost(c.p);
  }
}

UploadStaging::Chunk* UploadStaging::take(size_t bytes) {
  if (current_ >= 0) {
    Chunk& c = chunks_[static_cast<size_t>(current_)];
    if (c.used + bytes <= c.bytes) return &c;
    // Retired: its copies are queued; the event says when they are done.
    if (!c.done) SBP_CUDA(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    SBP_CUDA(cudaEventRecord(c.done, stream_));
    c.in_flight = true;
    current_ = -1;
  }
  for (size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    if (c.bytes < bytes) continue;
    if (c.in_flight) {
      const cudaError_t e = cudaEventQuery(c.done);
      if (e == cudaErrorNotReady) continue;
      SBP_CUDA(e);
      c.in_flight = false;
    }
    c.used = 0;
    current_ = static_cast<int>(i);
    return &c;
  }
  Chunk c;
  c.bytes = bytes > kChunkBytes ? bytes : kChunkBytes;
  if (cudaMallocHost(&c.p, c.bytes) != cudaSuccess) {
    cudaGetLastError();  // not sticky: the copy goes from pageable memory instead
    return nullptr;
  }
  chunks_.push_back(c);
  current_ = static_cast<int>(chunks_.size() - 1);
  return &chunks_.back();
}

void UploadStaging::upload(void* dst, const void* host, size_t bytes) {
  if (bytes == 0) return;
  Chunk* c = bytes <= kMaxStaged ? take(round_up(bytes)) : nullptr;
  if (!c) {  // too large to stage (or no pinned memory): from pageable memory, may wait
    SBP_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_));
    return;
  }
  char* src = static_cast<char*>(c->p) + c->used;
  c->used += round_up(bytes);
  std::memcpy(src, host, bytes);
  SBP_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void UploadStaging::stream_idle() {
  for (Chunk& c : chunks_) {
    c.in_flight = false;
    c.used = 0;
  }
}

size_t UploadStaging::staged_bytes() const {
  size_t n = 0;
  for (const Chunk& c : chunks_) n += c.bytes;
  return n;
}

}  // namespace sbp::cuda
