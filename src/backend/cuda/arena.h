#pragma once
// DeviceArena: the CUDA backend's memory, one per backend (= per device it runs on).
//
// Tensors are carved from large segments that the arena takes from a Source (cudaMalloc in the
// backend; never managed memory) and keeps: a cudaMalloc per tensor would synchronise the
// device on every allocation and free, and the engine allocates per chunk. Blocks are placed
// best-fit, 256-byte aligned (cuBLASLt's preferred alignment), and merged with free neighbours
// of the same segment when released. The arena records what it holds (`reserved`) and what
// is handed out (`in_use`), each with its high-water mark: `peak_reserved` is the device memory
// this backend took, which `bench` reports beside the ledger's peak.
//
// Placement::per_tensor (STREAMBP_CUDA_ARENA=per_tensor, cuda_backend.cu) gives every request a
// source allocation of exactly its size instead, given back at its release: slow (a cudaFree
// synchronises the device), for compute-sanitizer's memcheck, which sees the bounds of
// allocations, not of blocks inside a segment.
//
// Plain C++ (no CUDA): the bookkeeping is tested on the CPU with a host Source
// (tests/backend/cuda_arena_test.cpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

namespace sbp::cuda {

class DeviceArena {
 public:
  // source(bytes): a new segment, or nullptr when the device has no more; sink(p, bytes)
  // gives it back.
  using Source = std::function<void*(size_t)>;
  using Sink = std::function<void(void*, size_t)>;
  static constexpr size_t kAlignment = 256;
  enum class Placement { segments, per_tensor };

  // segment_bytes: the size of a new segment when a request is smaller (larger requests get a
  // segment of their own size). per_tensor: none; each request is its own allocation.
  DeviceArena(Source source, Sink sink, size_t segment_bytes,
              Placement placement = Placement::segments);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // nullptr when no segment can be had (the Pool turns that into an OutOfMemoryError).
  void* allocate(size_t bytes);
  void release(void* p);
  // Gives segments that hold no block back to the source.
  void trim();

  size_t in_use() const { return in_use_; }
  size_t peak_in_use() const { return peak_in_use_; }
  size_t reserved() const { return reserved_; }
  size_t peak_reserved() const { return peak_reserved_; }
  size_t segments() const { return segments_.size(); }
  // Starts both high-water marks again from what is held now (per-run peaks in `bench`).
  void reset_peaks() {
    peak_in_use_ = in_use_;
    peak_reserved_ = reserved_;
  }

 private:
  struct Segment {
    uintptr_t base;
    size_t bytes;
  };
  struct FreeBlock {
    size_t bytes;
    size_t segment;  // index into segments_
  };
  void* take(uintptr_t addr, size_t bytes);  // from the free block at addr
  void add_free(uintptr_t addr, size_t bytes, size_t segment);
  void erase_free(uintptr_t addr);
  bool grow(size_t bytes);

  Source source_;
  Sink sink_;
  size_t segment_bytes_;
  Placement placement_;
  std::unordered_map<uintptr_t, size_t> own_;  // per_tensor: allocation -> bytes
  std::vector<Segment> segments_;  // a released segment leaves {0, 0}
  std::map<uintptr_t, FreeBlock> free_;                 // by address: merging neighbours
  std::multimap<size_t, uintptr_t> free_by_size_;       // best fit
  std::unordered_map<uintptr_t, FreeBlock> used_;       // handed out
  size_t in_use_ = 0, peak_in_use_ = 0, reserved_ = 0, peak_reserved_ = 0;
};

}  // namespace sbp::cuda
