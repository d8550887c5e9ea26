#pragma once
// The AdamW update of one element, in torch.optim.AdamW's order (decoupled weight decay, bias
// corrections), written once for every place that runs it: the CPU backend's kernel
// (cpu/adamw.cpp), the CUDA kernel (cuda/adamw.cu) and the host optimizer of
// `offload: optimizer` (backend/host_math.h, which runs the CPU kernel on host memory).
//
// Why every multiply-add is an explicit fmaf: a compiler may fuse `a * b + c` into one rounding
// or not (nvcc fuses by default, g++ depending on -ffp-contract and the loop it inlines into),
// and then the device's update and the host's differ in the last bit. fmaf has one rounding on
// every machine, so the formula below names its bits and every caller gets the same ones.
// Division and sqrt are IEEE on both sides (nvcc's defaults -prec-div, -prec-sqrt).
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace sbp {

struct AdamWScalars {
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float decay;      // 1 - lr * weight_decay
  float b1, b2, eps;
};

// The per-step scalars, on the host: the bias corrections in fp64; 1 - lr * wd with one
// rounding (an fma in fp64 is exact for a product of two floats, then rounded to float).
inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float wd,
                                  int64_t step) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  const double decay = std::fma(-static_cast<double>(lr), static_cast<double>(wd), 1.0);
  return AdamWScalars{static_cast<float>(lr / bc1), static_cast<float>(std::sqrt(bc2)),
                      static_cast<float>(decay), beta1, beta2, eps};
}

// Updates m, v in place and returns the new parameter.
//   m' = b1 m + (1 - b1) g          v' = b2 v + (1 - b2) g^2
//   p' = p decay - step_size m' / (sqrt(v') / bc2_sqrt + eps)
SBP_HD float adamw_update(float p, float g, float* m, float* v, const AdamWScalars& s) {
  p *= s.decay;
  *m = fmaf(s.b1, *m, (1.0f - s.b1) * g);
  *v = fmaf(s.b2, *v, ((1.0f - s.b2) * g) * g);
  const float denom = sqrtf(*v) / s.bc2_sqrt + s.eps;
  return fmaf(-s.step_size, *m / denom, p);
}

}  // namespace sbp
