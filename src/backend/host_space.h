#pragma once
// The host memory spaces of Backend::host_memory() (backend.h "host offload"): where a step
// parks offloaded tensors. A host space belongs to one backend: whether a range is under a
// queued copy is the backend's to say, so in_flight() and drain_copies() ask it.
#include <cstddef>

#include "backend/host_block_cache.h"
#include "core/memory.h"

namespace sbp {

// Every element of a float tensor in host-addressable memory to NaN (MemorySpace::poison).
void poison_host(const Tensor& t);

class HostSpace : public MemorySpace {
 public:
  explicit HostSpace(const MemorySpace& backend) : backend_(backend) {}
  const char* in_flight(const void* p, size_t bytes) const override {
    return backend_.in_flight(p, bytes);
  }
  void drain_copies() override { const_cast<MemorySpace&>(backend_).drain_copies(); }

 private:
  const MemorySpace& backend_;
};

// Ordinary 64-byte aligned host memory (the CPU backend's host space; allocate/release may be
// replaced, as pinned memory is on a GPU).
class PlainHostSpace : public HostSpace {
 public:
  using HostSpace::HostSpace;
  void* allocate_bytes(size_t bytes) override;
  void release_bytes(void* p, size_t bytes) override;
  void release_cached() override { blocks_.release_cached(); }
  bool holds_data() const override { return true; }
  bool host_addressable() const override { return true; }

 protected:
  void upload_impl(void* dst, const void* host, size_t bytes) override;
  void download_impl(void* host, const void* src, size_t bytes) override;
  void zero_impl(const Tensor& t) override;
  void poison_impl(const Tensor& t) override;

 private:
  HostBlockCache blocks_;
};

// A host space that holds no data (the shape-only planner's): the same bytes are recorded.
class ShapeOnlyHostSpace final : public HostSpace {
 public:
  using HostSpace::HostSpace;
  void* allocate_bytes(size_t) override { return nullptr; }
  void release_bytes(void*, size_t) override {}
  bool holds_data() const override { return false; }
  bool host_addressable() const override { return false; }

 protected:
  void upload_impl(void*, const void*, size_t) override {}
  void download_impl(void*, const void*, size_t) override {}
  void zero_impl(const Tensor&) override {}
  void poison_impl(const Tensor&) override {}
};

}  // namespace sbp
