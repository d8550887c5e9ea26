#include "backend/cuda/arena.h"

#include <algorithm>

namespace sbp::cuda {

namespace {
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

DeviceArena::DeviceArena(Source source, Sink sink, size_t segment_bytes, Placement placement)
    : source_(std::move(source)), sink_(std::move(sink)),
      segment_bytes_(round_up(std::max<size_t>(segment_bytes, kAlignment), kAlignment)),
      placement_(placement) {}

DeviceArena::~DeviceArena() {
  for (const Segment& s : segments_)
    if (s.bytes) sink_(reinterpret_cast<void*>(s.base), s.bytes);
  for (const auto& [p, bytes] : own_) sink_(reinterpret_cast<void*>(p), bytes);
}

void DeviceArena::add_free(uintptr_t addr, size_t bytes, size_t segment) {
  free_[addr] = FreeBlock{bytes, segment};
  free_by_size_.emplace(bytes, addr);
}

void DeviceArena::erase_free(uintptr_t addr) {
  const auto it = free_.find(addr);
  auto [lo, hi] = free_by_size_.equal_range(it->second.bytes);
  for (auto s = lo; s != hi; ++s)
    if (s->second == addr) {
      free_by_size_.erase(s);
      break;
    }
  free_.erase(it);
}

bool DeviceArena::grow(size_t bytes) {
  const size_t want = std::max(bytes, segment_bytes_);
  void* p = source_(want);
  size_t got = want;
  if (!p && want > bytes) {  // the device may still have room for the request itself
    p = source_(bytes);
    got = bytes;
  }
  if (!p) {
    trim();  // free segments back to the device, then once more
    p = source_(bytes);
    got = bytes;
  }
  if (!p) return false;
  segments_.push_back(Segment{reinterpret_cast<uintptr_t>(p), got});
  add_free(reinterpret_cast<uintptr_t>(p), got, segments_.size() - 1);
  reserved_ += got;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return true;
}

void* DeviceArena::take(uintptr_t addr, size_t bytes) {
  const FreeBlock b = free_.at(addr);
  erase_free(addr);
  if (b.bytes > bytes) add_free(addr + bytes, b.bytes - bytes, b.segment);
  used_[addr] = FreeBlock{bytes, b.segment};
  in_use_ += bytes;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return reinterpret_cast<void*>(addr);
}

void* DeviceArena::allocate(size_t bytes) {
  if (placement_ == Placement::per_tensor) {  // exactly the bytes asked: their bounds are its
    const size_t want = std::max<size_t>(bytes, 1);
    void* p = source_(want);
    if (!p) return nullptr;
    own_[reinterpret_cast<uintptr_t>(p)] = want;
    in_use_ += want;
    reserved_ += want;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    return p;
  }
  const size_t need = round_up(std::max<size_t>(bytes, 1), kAlignment);
  auto it = free_by_size_.lower_bound(need);  // the smallest block that fits
  if (it == free_by_size_.end()) {
    if (!grow(need)) return nullptr;
    it = free_by_size_.lower_bound(need);
  }
  return take(it->second, need);
}

void DeviceArena::release(void* p) {
  if (!p) return;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  if (const auto o = own_.find(addr); o != own_.end()) {
    sink_(p, o->second);
    in_use_ -= o->second;
    reserved_ -= o->second;
    own_.erase(o);
    return;
  }
  const auto u = used_.find(addr);
  if (u == used_.end()) return;  // not ours (the Pool never does this)
  FreeBlock b = u->second;
  used_.erase(u);
  in_use_ -= b.bytes;
  uintptr_t start = addr;
  // Merge with the free block after it and the one before it, within the same segment.
  const auto next = free_.find(addr + b.bytes);
  if (next != free_.end() && next->second.segment == b.segment) {
    b.bytes += next->second.bytes;
    erase_free(next->first);
  }
  auto prev = free_.lower_bound(addr);
  if (prev != free_.begin()) {
    --prev;
    if (prev->first + prev->second.bytes == addr && prev->second.segment == b.segment) {
      start = prev->first;
      b.bytes += prev->second.bytes;
      erase_free(prev->first);
    }
  }
  add_free(start, b.bytes, b.segment);
}

void DeviceArena::trim() {
  for (size_t i = 0; i < segments_.size(); ++i) {
    Segment& s = segments_[i];
    if (!s.bytes) continue;
    const auto f = free_.find(s.base);
    if (f == free_.end() || f->second.bytes != s.bytes) continue;  // holds a block
    erase_free(s.base);
    sink_(reinterpret_cast<void*>(s.base), s.bytes);
    reserved_ -= s.bytes;
    s = Segment{0, 0};
  }
}

}  // namespace sbp::cuda
