#pragma once
// The tensor cores' arithmetic in the emulation (mma.h's WMMA, cublaslt.cpp's BF16 and FAST_*
// products): what NVIDIA documents, and where it leaves the behaviour open, the least favourable
// choice it allows.
//
// PTX ISA, "wmma.mma" and "mma" (Warp Level Matrix Multiply-Accumulate Instructions),
// "Precision and rounding" for .bf16 and .tf32 with an .f32 accumulator: "Element-wise
// multiplication of matrix A and B is performed with specified precision. Accumulation of the
// intermediate values is performed with at least single precision. The accumulation order,
// rounding and handling of subnormal inputs is unspecified." So:
//  - products: exact (a TF32 x TF32 product has 22 significant bits, a BF16 x BF16 one 16:
//    both exact in fp32, which is "the specified precision" or better);
//  - subnormal inputs: flushed to zero (sign kept), the coarsest handling allowed;
//  - order: the k products of one instruction in a binary tree (pairs of neighbours, then pairs
//    of those), then the accumulator C added to the tree's sum; instruction after instruction
//    along k for a longer product;
//  - rounding: every addition rounded to fp32 toward zero. "At least single precision" allows
//    one rounding per addition; toward zero is the direction measurements of the hardware found
//    (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ
//    Computer Science 7:e330, 2021: V100, T4, A100; Khattak and Mikaitis, "Accurate models of
//    NVIDIA tensor cores", arXiv:2512.07004: up to H100 and B200), and its error is biased (one
//    ulp at most, always towards zero), so long accumulations drift instead of averaging out:
//    the kernels' bounds must hold for that.
// The hardware adds the products with a few extra bits before one normalisation (the papers
// above); rounding every addition to fp32 is never more accurate than that.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sbp::cudaemu::tc {

// Subnormal inputs read as zero of the same sign.
inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// a + b rounded to fp32 toward zero: s = a + b rounded to nearest and its exact error e
// (TwoSum: s + e = a + b exactly); when the exact sum lies nearer zero than s, the float next to
// s towards zero.
inline float add_rz(float a, float b) {
  const float s = a + b;
  if (!std::isfinite(s) || s == 0.0f) return s;
  const float bb = s - a;
  const float e = (a - (s - bb)) + (b - bb);
  if (e == 0.0f || (e < 0.0f) != (s > 0.0f)) return s;
  // The float next to s towards zero: its magnitude's bits minus one (s finite, not zero).
  uint32_t u;
  std::memcpy(&u, &s, 4);
  --u;
  float t;
  std::memcpy(&t, &u, 4);
  return t;
}

// c + sum_i x[i] y[i] over one instruction's k (at most 16) products, as above; x and y are the
// operands as the tensor cores read them (TF32 or BF16 values held in floats).
inline float mma_dot(float c, const float* x, const float* y, int k) {
  float level[16];
  int n = k;
  for (int i = 0; i < n; ++i) level[i] = ftz(x[i]) * ftz(y[i]);
  while (n > 1) {
    for (int i = 0; i < n / 2; ++i) level[i] = add_rz(level[2 * i], level[2 * i + 1]);
    if (n % 2) level[n / 2] = level[n - 1];
    n = (n + 1) / 2;
  }
  return add_rz(ftz(c), n == 1 ? level[0] : 0.0f);
}

}  // namespace sbp::cudaemu::tc
