#pragma once
// The CPU backend's element-wise kernels on whole tensors of host-addressable bytes (F32 or
// BF16, storage.h), for the two callers that run them: CpuBackend's *_impl (the device side of
// a CPU run) and HostMath (host_math.h: the host side of `offload: optimizer`, on every
// backend). One kernel for both, so a step gives the same bits whichever side computes it.
// No checks here: the callers check.
#include "backend/backend.h"

namespace sbp::cpu {

void fill_floats(const Tensor& x, float value);
void copy_floats(const Tensor& dst, const Tensor& src);  // F32 <-> BF16 rounds to nearest even
void add_floats(const Tensor& y, const Tensor& x);        // y += x
void scale_floats(const Tensor& x, float s);              // x *= s
double sum_squares_floats(const Tensor& x);               // fp64, in a fixed order (reduce.h)
void adamw_floats(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWStep& s);

}  // namespace sbp::cpu
