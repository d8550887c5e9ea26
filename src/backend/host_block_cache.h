#pragma once
// Host memory for tensors, with freed large blocks kept for the next allocation of the same
// size, within the process's own high-water mark.
//
// Why: a step allocates and frees the same few shapes chunk after chunk. Without reuse every
// large buffer is a fresh mapping (src/cli/main.cpp fixes glibc's mmap threshold so that
// freed memory goes back to the system and resident memory follows the ledger), and the
// first write to each of its pages is a page fault plus the kernel zeroing the page: on a
// Qwen3-0.6B step (4 layers, T = 4096, 2 threads, Zen 4) that was 2 s of 41 s, mostly in the
// memory-bound kernels that write fresh outputs (RMSNorm, SwiGLU, copies) and in munmap.
//
// The bound: cached bytes never exceed high_water - live, where live is the bytes handed out
// now and high_water the most ever handed out at once. So resident memory (live + cached) never
// rises above the peak the program would have reached without the cache, and `plan`'s ledger
// peak still predicts the process's peak (tests/plan/plan_rss_slow_test.cpp). An allocation
// that sets a new peak empties the cache first.
//
// Under AddressSanitizer nothing is cached: a reused block would hide a use after free.
#include <cstddef>
#include <mutex>
#include <vector>

namespace sbp {

class HostBlockCache {
 public:
  // Blocks below this size bypass the cache: glibc's heap already reuses them (they sit below
  // the mmap threshold), and caching them would only fragment it.
  static constexpr size_t kMinCachedBytes = size_t{128} << 10;
  // Enough for every distinct buffer of a layer chunk's step several times over; a lookup is a
  // scan of this list.
  static constexpr size_t kMaxCachedBlocks = 128;

  HostBlockCache() = default;
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;
  ~HostBlockCache();

  // 64-byte aligned; nullptr when the system refuses (after giving the cache back).
  void* allocate(size_t bytes);
  void release(void* p, size_t bytes);
  // Gives every cached block back to the system and restarts the high-water mark at the live
  // bytes, so that the next measured step's peak is its own (bench interleaves modes).
  void release_cached();
  // Bytes held for reuse now (tests).
  size_t cached_bytes() const;
  // Whether this build caches at all (not under AddressSanitizer).
  static bool enabled();

 private:
  struct Block {
    void* p;
    size_t bytes;
  };
  void evict_oldest_locked();

  mutable std::mutex mu_;
  std::vector<Block> cached_;  // oldest first
  size_t cached_bytes_ = 0;
  size_t live_bytes_ = 0;  // of blocks of kMinCachedBytes or more (the others are not counted)
  size_t high_water_ = 0;
};

}  // namespace sbp
