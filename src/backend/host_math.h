#pragma once
// Arithmetic on tensors of a backend's host space (Backend::host_memory), run by this process's
// CPU on every core: the host side of `offload: optimizer` (dist/data_parallel.h), where the
// gradients are accumulated, measured, clipped, and the AdamW update made, in host memory.
//
// The kernels are the CPU backend's own (cpu/float_kernels.h), so a CPU run gives the same bits
// whether its optimizer runs on the "device" or here; the AdamW formula is also the CUDA
// kernel's (adamw_math.h). The checks are the Backend's, and two more:
//   - every tensor lives in this host space (a device tensor is refused: on the checking
//     backend and on a GPU the host cannot read it; the checking backend's memory faults on a
//     read that skips this check);
//   - no tensor is under a queued copy (Backend::offload_async / prefetch_async not yet waited
//     for): the host would read bytes the copy has not written yet.
// The caller makes sure the device has finished the copies it waited for (Backend::synchronize)
// before it calls: on a GPU a waited-for copy may still be running.
// A host space that holds no data (the shape-only planner's) makes every call a no-op (sums 0).
#include <span>

#include "backend/backend.h"
#include "core/memory.h"

namespace sbp {

class HostMath {
 public:
  explicit HostMath(MemorySpace& host) : host_(host) {}

  void fill(const Tensor& x, float value);
  void copy(const Tensor& dst, const Tensor& src);  // as Backend::copy (F32 <-> BF16 rounds)
  void add_inplace(const Tensor& y, const Tensor& x);
  void scale_inplace(const Tensor& x, float s);
  // As Backend::sum_squares_each: each tensor's sum of squares in fp64, in a fixed order.
  void sum_squares_each(std::span<const Tensor> xs, std::span<double> out);
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWStep& s);

  MemorySpace& space() { return host_; }

 private:
  // Checks that every tensor is defined, of this space and not in flight; false when the space
  // holds no data (nothing to compute).
  bool ready(const char* op, std::initializer_list<const Tensor*> tensors) const;
  MemorySpace& host_;
};

}  // namespace sbp
