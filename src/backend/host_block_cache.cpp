#include "backend/host_block_cache.h"

#include <algorithm>
#include <cstdlib>

#include "core/sanitizers.h"

namespace sbp {

namespace {

constexpr size_t kAlignment = 64;  // one cache line; also enough for AVX-512 loads
size_t block_size(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
}

// Under AddressSanitizer nothing is cached, so that a use after free stays visible.
constexpr bool kCache = !kAddressSanitizer;

}  // namespace

HostBlockCache::~HostBlockCache() {
  for (const Block& b : cached_) std::free(b.p);
}

void* HostBlockCache::allocate(size_t bytes) {
  const size_t n = block_size(bytes);
  if (!kCache || n < kMinCachedBytes) return std::aligned_alloc(kAlignment, n);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    live_bytes_ += n;
    // The newest block of this size: the one most likely still in the caches.
    for (size_t i = cached_.size(); i-- > 0;) {
      if (cached_[i].bytes != n) continue;
      void* p = cached_[i].p;
      cached_.erase(cached_.begin() + static_cast<std::ptrdiff_t>(i));
      cached_bytes_ -= n;
      return p;
    }
    high_water_ = std::max(high_water_, live_bytes_);
    while (!cached_.empty() && live_bytes_ + cached_bytes_ > high_water_) evict_oldest_locked();
  }
  void* p = std::aligned_alloc(kAlignment, n);
  if (!p) {
    release_cached();
    p = std::aligned_alloc(kAlignment, n);
  }
  if (!p) {
    const std::lock_guard<std::mutex> lock(mu_);
    live_bytes_ -= n;
  }
  return p;
}

void HostBlockCache::release(void* p, size_t bytes) {
  const size_t n = block_size(bytes);
  if (!kCache || n < kMinCachedBytes || !p) {
    std::free(p);
    return;
  }
  const std::lock_guard<std::mutex> lock(mu_);
  // live + cached stays within the high-water mark: the block moves from one to the other.
  live_bytes_ -= n;
  cached_.push_back({p, n});
  cached_bytes_ += n;
  if (cached_.size() > kMaxCachedBlocks) evict_oldest_locked();
}

void HostBlockCache::release_cached() {
  const std::lock_guard<std::mutex> lock(mu_);
  while (!cached_.empty()) evict_oldest_locked();
  high_water_ = live_bytes_;
}

size_t HostBlockCache::cached_bytes() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

bool HostBlockCache::enabled() { return kCache; }

void HostBlockCache::evict_oldest_locked() {
  std::free(cached_.front().p);
  cached_bytes_ -= cached_.front().bytes;
  cached_.erase(cached_.begin());
}

}  // namespace sbp
