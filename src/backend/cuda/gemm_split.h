#pragma once
// An fp32 value as a sum of bf16 parts, so that a product with an F32 operand runs on the
// bf16 tensor cores (gemm.cu): x = hi + mid + lo, each part the round-to-nearest-even bf16 of
// what the parts before it leave.
//
// Why three parts: a bf16 holds 8 significant bits and an fp32 24, so three parts hold every
// bit of a normal fp32 value (each residual is exact in fp32 and has at most 16, then 8,
// significant bits left). A bf16 x bf16 product is exact in fp32 (16 bits), so three bf16 GEMMs
// accumulating in fp32 compute what one fp32 GEMM of the same operands does, up to the order of
// the fp32 additions. Two parts keep 16 bits (error up to 2^-16 |x|, ~256 fp32 ulps): measured
// in tools/bench/gemm_accuracy.cpp, 5-10x the fp32 path's error, so not used (the CPU backend,
// the numerical reference, multiplies the fp32 operand as it is).
//
// Exceptions, none reachable by a finite gradient of a sane step: |x| above the largest bf16
// (hi rounds to inf), and parts below the smallest normal bf16 (the lowest bits are lost, as
// they are in an fp32 subnormal). NaN and inf go to hi (mid and lo are then NaN) and spread as
// they would through fp32 arithmetic.
#include <cstdint>

#include "backend/cuda/kernel_math.h"
#include "backend/gemm_scratch.h"
#include "core/host_device.h"

namespace sbp::cuda {

constexpr int kSplitParts = kGemmSplitParts;

struct Bf16Parts {
  uint16_t p[kSplitParts];  // hi, mid, lo
};

SBP_HD Bf16Parts split_bf16(float x) {
  Bf16Parts s;
  float rest = x;
  for (int i = 0; i < kSplitParts; ++i) {
    s.p[i] = float_to_bf16(rest);
    rest = rest - bf16_to_float(s.p[i]);  // exact: rest and the part share their top bits
  }
  return s;
}

}  // namespace sbp::cuda
