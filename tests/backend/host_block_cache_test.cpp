// HostBlockCache: a freed large block serves the next allocation of its size, and what it keeps
// never lifts live + cached above the most ever live at once (the bound that keeps the
// process's peak resident memory at the ledger's, tests/plan/plan_rss_slow_test.cpp).
#include "backend/host_block_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace sbp {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostBlockCache, AFreedBlockServesTheNextOfItsSize) {
  if (!HostBlockCache::enabled()) GTEST_SKIP() << "nothing is cached under AddressSanitizer";
  HostBlockCache cache;
  void* a = cache.allocate(kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 1, kMiB);
  cache.release(a, kMiB);
  EXPECT_EQ(cache.cached_bytes(), kMiB);
  void* b = cache.allocate(kMiB - 10);  // the same 64-byte rounded size
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.release(b, kMiB - 10);
}

TEST(HostBlockCache, ANewPeakEmptiesTheCache) {
  if (!HostBlockCache::enabled()) GTEST_SKIP() << "nothing is cached under AddressSanitizer";
  HostBlockCache cache;
  void* a = cache.allocate(kMiB);
  void* b = cache.allocate(kMiB);  // high water: 2 MiB
  cache.release(a, kMiB);
  cache.release(b, kMiB);
  EXPECT_EQ(cache.cached_bytes(), 2 * kMiB);
  void* c = cache.allocate(3 * kMiB);  // live 3 MiB > 2 MiB: nothing may stay cached
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.release(c, 3 * kMiB);
}

TEST(HostBlockCache, LiveAndCachedStayWithinTheHighWaterMark) {
  if (!HostBlockCache::enabled()) GTEST_SKIP() << "nothing is cached under AddressSanitizer";
  HostBlockCache cache;
  void* a = cache.allocate(kMiB);  // high water 1 MiB
  cache.release(a, kMiB);          // live 0, cached 1 MiB
  void* d = cache.allocate(kMiB / 2);  // another size: live 0.5 + cached 1 > 1, so a goes
  EXPECT_EQ(cache.cached_bytes(), 0u);
  void* e = cache.allocate(kMiB / 4);  // live 0.75 MiB, high water still 1 MiB
  cache.release(e, kMiB / 4);          // live 0.5, cached 0.25: within 1 MiB
  EXPECT_EQ(cache.cached_bytes(), kMiB / 4);
  cache.release(d, kMiB / 2);
  EXPECT_EQ(cache.cached_bytes(), kMiB / 4 + kMiB / 2);
  cache.release_cached();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  // The high-water mark restarted at the live bytes (0): a block released now may be kept
  // (live + cached never exceed what was live before the release), but allocating another size
  // gives it back.
  void* f = cache.allocate(kMiB);
  cache.release(f, kMiB);
  EXPECT_EQ(cache.cached_bytes(), kMiB);
  void* g = cache.allocate(kMiB / 2);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.release(g, kMiB / 2);
}

TEST(HostBlockCache, SmallBlocksAreNotCached) {
  HostBlockCache cache;
  void* a = cache.allocate(HostBlockCache::kMinCachedBytes / 2);
  ASSERT_NE(a, nullptr);
  cache.release(a, HostBlockCache::kMinCachedBytes / 2);
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

}  // namespace
}  // namespace sbp
