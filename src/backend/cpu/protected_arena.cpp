#include "backend/cpu/protected_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "core/error.h"

namespace sbp {

namespace {
constexpr size_t kAlignment = 64;
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
}  // namespace

ProtectedArena::ProtectedArena(size_t reserve_bytes)
    : reserved_(round_up(reserve_bytes, page_size())) {
  void* p = mmap(nullptr, reserved_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw Error("protected arena: cannot reserve address space");
  base_ = static_cast<char*>(p);
}

ProtectedArena::~ProtectedArena() { munmap(base_, reserved_); }

void* ProtectedArena::allocate(size_t bytes) {
  const size_t n = round_up(std::max<size_t>(bytes, 1), kAlignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const size_t offset = it->first, rest = it->second - n;
    free_.erase(it);
    if (rest > 0) free_[offset + n] = rest;
    used_[offset] = n;
    return base_ + offset;
  }
  // Grow: the new part of the range stays PROT_NONE until the memory is next opened.
  const size_t offset = top_;
  const size_t grown = round_up(top_ + n, page_size());
  if (grown > reserved_) return nullptr;  // the Pool reports out of memory
  if (grown > offset + n) free_[offset + n] = grown - offset - n;
  top_ = grown;
  used_[offset] = n;
  return base_ + offset;
}

void ProtectedArena::release(void* p) {
  const size_t offset = static_cast<size_t>(static_cast<char*>(p) - base_);
  auto it = used_.find(offset);
  SBP_CHECK(it != used_.end(), "protected arena: release of memory it did not hand out");
  size_t start = offset, size = it->second;
  used_.erase(it);
  // Coalesce with the free neighbours.
  auto next = free_.find(start + size);
  if (next != free_.end()) {
    size += next->second;
    free_.erase(next);
  }
  auto prev = free_.lower_bound(start);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
}

void ProtectedArena::protect(int prot) {
  if (top_ == 0) return;
  if (mprotect(base_, top_, prot) != 0) throw Error("protected arena: mprotect failed");
}

void ProtectedArena::open() { protect(PROT_READ | PROT_WRITE); }

void ProtectedArena::close() { protect(PROT_NONE); }

}  // namespace sbp
