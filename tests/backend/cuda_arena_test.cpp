// The CUDA backend's arena bookkeeping (src/backend/cuda/arena.h), on the CPU: a host Source
// stands in for cudaMalloc, so placement, merging, peaks and trimming are tested without a GPU.
#include "backend/cuda/arena.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

namespace sbp::cuda {
namespace {

// A Source over host memory that records what is outstanding and can be told to fail.
struct HostSource {
  std::map<void*, size_t> live;
  size_t limit = SIZE_MAX;  // total bytes it will hand out
  size_t total = 0;
  int calls = 0;
  DeviceArena make(size_t segment,
                   DeviceArena::Placement placement = DeviceArena::Placement::segments) {
    return DeviceArena(
        [this](size_t b) -> void* {
          ++calls;
          if (total + b > limit) return nullptr;
          // aligned_alloc wants a multiple of the alignment (ASan enforces it); a per-tensor
          // request is the tensor's exact size.
          const size_t a = DeviceArena::kAlignment;
          void* p = std::aligned_alloc(a, (b + a - 1) / a * a);
          live[p] = b;
          total += b;
          return p;
        },
        [this](void* p, size_t b) {
          EXPECT_EQ(live.at(p), b);
          live.erase(p);
          total -= b;
          std::free(p);
        },
        segment, placement);
  }
};

// STREAMBP_CUDA_ARENA=per_tensor: each request its own allocation of exactly its bytes (their
// bounds are the tensor's, for compute-sanitizer), given back at release; counted as the
// segments' placement counts.
TEST(CudaArena, PerTensorGivesEachRequestItsOwnAllocation) {
  HostSource src;
  {
    DeviceArena a = src.make(1 << 20, DeviceArena::Placement::per_tensor);
    void* p = a.allocate(10);
    void* q = a.allocate(300);
    ASSERT_NE(p, nullptr);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(src.live.at(p), 10u);
    EXPECT_EQ(src.live.at(q), 300u);
    EXPECT_EQ(a.in_use(), 310u);
    EXPECT_EQ(a.reserved(), 310u);
    a.release(p);
    EXPECT_EQ(src.live.count(p), 0u);  // given back at once
    EXPECT_EQ(a.in_use(), 300u);
    EXPECT_EQ(a.peak_in_use(), 310u);
    EXPECT_EQ(a.peak_reserved(), 310u);
    src.limit = src.total;
    EXPECT_EQ(a.allocate(1), nullptr);  // the source refuses: the Pool reports out of memory
  }
  EXPECT_TRUE(src.live.empty());  // the arena's destruction gave q back
}

TEST(CudaArena, AlignsAndCountsInUseAndPeak) {
  HostSource src;
  DeviceArena a = src.make(1 << 20);
  void* p = a.allocate(10);
  void* q = a.allocate(300);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 256, 0u);
  EXPECT_EQ(a.in_use(), 256u + 512u);  // rounded up to the alignment
  EXPECT_EQ(a.segments(), 1u);         // both from one segment
  EXPECT_EQ(a.reserved(), size_t{1} << 20);
  a.release(p);
  EXPECT_EQ(a.in_use(), 512u);
  EXPECT_EQ(a.peak_in_use(), 768u);
  a.release(q);
  EXPECT_EQ(a.in_use(), 0u);
  EXPECT_EQ(src.calls, 1);
}

TEST(CudaArena, ReusesAndMergesFreedBlocks) {
  HostSource src;
  DeviceArena a = src.make(4096);
  void* b0 = a.allocate(1024);
  void* b1 = a.allocate(1024);
  void* b2 = a.allocate(1024);
  void* b3 = a.allocate(1024);
  EXPECT_EQ(a.segments(), 1u);
  a.release(b1);
  a.release(b2);  // merged with b1's block: 2048 contiguous bytes
  void* big = a.allocate(2048);
  EXPECT_EQ(big, b1);
  EXPECT_EQ(a.segments(), 1u);  // no new segment was needed
  a.release(b0);
  a.release(big);
  a.release(b3);
  // Everything merged back into one block: the whole segment fits again.
  void* whole = a.allocate(4096);
  EXPECT_EQ(whole, b0);
  EXPECT_EQ(a.segments(), 1u);
  a.release(whole);
}

TEST(CudaArena, BestFitPicksTheSmallestBlockThatFits) {
  HostSource src;
  DeviceArena a = src.make(8192);
  void* x = a.allocate(2048);
  void* sep1 = a.allocate(256);
  void* y = a.allocate(512);
  void* sep2 = a.allocate(256);
  a.release(x);
  a.release(y);
  EXPECT_EQ(a.allocate(512), y);  // not the 2048-byte hole, nor the tail
  EXPECT_EQ(a.allocate(1024), x);
  (void)sep1;
  (void)sep2;
}

TEST(CudaArena, LargeRequestsGetTheirOwnSegmentAndPeaksAreKept) {
  HostSource src;
  DeviceArena a = src.make(4096);
  void* small = a.allocate(100);
  void* large = a.allocate(10000);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(a.segments(), 2u);
  EXPECT_EQ(a.reserved(), 4096u + 10240u);
  a.release(large);
  a.trim();  // the large segment is empty now: back to the source
  EXPECT_EQ(a.reserved(), 4096u);
  EXPECT_EQ(a.peak_reserved(), 4096u + 10240u);
  EXPECT_EQ(src.live.size(), 1u);
  a.release(small);
}

TEST(CudaArena, OutOfMemoryIsNullAndEmptySegmentsAreTrimmedBeforeGivingUp) {
  HostSource src;
  src.limit = 10240;
  DeviceArena a = src.make(4096);
  void* p = a.allocate(4096);  // segment 1
  void* q = a.allocate(2048);  // segment 2, half used
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(a.allocate(4096), nullptr);  // no block fits and the source is exhausted
  a.release(q);
  // No free block holds 6144 bytes, and the source cannot add them to the 8192 it gave: the
  // arena gives the empty segment 2 back, then gets the request.
  void* r = a.allocate(6144);
  EXPECT_NE(r, nullptr);
  EXPECT_EQ(a.reserved(), 4096u + 6144u);
  a.release(p);
  a.release(r);
}

TEST(CudaArena, DestructorGivesEverySegmentBack) {
  HostSource src;
  {
    DeviceArena a = src.make(1024);
    for (int i = 0; i < 5; ++i) a.allocate(1000);
    EXPECT_EQ(src.live.size(), 5u);
  }
  EXPECT_TRUE(src.live.empty());
}

TEST(CudaArena, ManyRandomAllocationsNeverOverlap) {
  HostSource src;
  DeviceArena a = src.make(1 << 16);
  std::map<uintptr_t, size_t> held;
  unsigned seed = 7;
  auto next = [&] { return seed = seed * 1103515245u + 12345u; };
  for (int it = 0; it < 2000; ++it) {
    if (held.empty() || next() % 3 != 0) {
      const size_t bytes = 1 + next() % 5000;
      const auto p = reinterpret_cast<uintptr_t>(a.allocate(bytes));
      ASSERT_NE(p, 0u);
      auto after = held.lower_bound(p);
      if (after != held.end()) {
        EXPECT_LE(p + bytes, after->first);
      }
      if (after != held.begin()) {
        --after;
        EXPECT_LE(after->first + after->second, p);
      }
      held[p] = bytes;
    } else {
      auto it2 = held.begin();
      std::advance(it2, next() % held.size());
      a.release(reinterpret_cast<void*>(it2->first));
      held.erase(it2);
    }
  }
  for (auto& [p, b] : held) a.release(reinterpret_cast<void*>(p));
  EXPECT_EQ(a.in_use(), 0u);
}

}  // namespace
}  // namespace sbp::cuda
