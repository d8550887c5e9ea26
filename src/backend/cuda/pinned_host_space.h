#pragma once
// The CUDA backend's host space (Backend::host_memory): page-locked host memory, so that the
// copy stream's cudaMemcpyAsync runs asynchronously and at the bus's rate. cudaMallocHost and
// cudaFreeHost are slow and may synchronise the device, and a step asks for blocks of the same
// few sizes every time (one per offloaded layer checkpoint), so released blocks are kept, by
// size, and handed out again; they go back to the driver when the backend is destroyed.
#include <cstddef>
#include <map>

#include "backend/host_space.h"

namespace sbp {

class PinnedHostSpace final : public PlainHostSpace {
 public:
  using PlainHostSpace::PlainHostSpace;
  ~PinnedHostSpace() override;
  void* allocate_bytes(size_t bytes) override;  // nullptr when the driver refuses (the Pool: OOM)
  void release_bytes(void* p, size_t bytes) override;
  // Pinned memory is host memory, but a copy may be reading or writing it: not for a
  // communicator to reduce in place.
  bool host_addressable() const override { return false; }

 private:
  std::multimap<size_t, void*> cached_;  // released blocks by size
};

}  // namespace sbp
