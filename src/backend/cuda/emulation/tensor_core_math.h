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
#include <bit>
#include <cmath>
#include <cstdint>

namespace sbp::cudaemu::tc {

// Subnormal inputs read as zero of the same sign (branch-free: the emulation runs millions).
inline float ftz(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x7f800000u) == 0 ? std::bit_cast<float>(u & 0x80000000u) : x;
}

// a + b rounded to fp32 toward zero: s = a + b rounded to nearest and its exact error e
// (TwoSum: s + e = a + b exactly); when e is not zero and points towards zero from s (opposite
// signs), the exact sum lies between s and the float next to it towards zero, which is then the
// answer: s's bits minus one (s finite and not zero there). Branch-free, so that loops of it
// vectorise.
inline float add_rz(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  const float e = (a - (s - bb)) + (b - bb);
  const uint32_t us = std::bit_cast<uint32_t>(s), ue = std::bit_cast<uint32_t>(e);
  const uint32_t step = static_cast<uint32_t>((ue & 0x7fffffffu) != 0) & ((us ^ ue) >> 31) &
                        static_cast<uint32_t>((us & 0x7f800000u) != 0x7f800000u);
  return std::bit_cast<float>(us - step);
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

// mma_dot for a whole tile at once: d[i] = mma_dot(c[i], a row, b column) for the M x N outputs
// of A (M, K) row-major times B (K, N) row-major, K a power of two: the same operations in the
// same order, arranged so that the loops over the outputs vectorise.
template <int M, int N, int K>
void mma_tile(float* d, const float* a, const float* b, const float* c) {
  static_assert(K >= 1 && K <= 16 && (K & (K - 1)) == 0, "a power-of-two k");
  float p[K][M * N];
  for (int k = 0; k < K; ++k)
    for (int r = 0; r < M; ++r) {
      const float x = ftz(a[r * K + k]);
      for (int n = 0; n < N; ++n) p[k][r * N + n] = x * ftz(b[k * N + n]);
    }
  for (int w = K; w > 1; w /= 2)
    for (int k = 0; k < w / 2; ++k)
      for (int i = 0; i < M * N; ++i) p[k][i] = add_rz(p[2 * k][i], p[2 * k + 1][i]);
  for (int i = 0; i < M * N; ++i) d[i] = add_rz(ftz(c[i]), p[0][i]);
}

// acc[i] = mma_dot(acc[i], x + i ldx, y, k) for i < rows (one instruction's k <= 16 of several
// output rows against one column): the same operations in the same order, the loops over the
// rows vectorised, 64 rows at a time.
inline void mma_dot_rows(float* acc, const float* x, int64_t ldx, const float* y, int64_t rows,
                         int k) {
  constexpr int kRows = 64;
  float level[16][kRows];
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    const int nr = static_cast<int>(rows - r0 < kRows ? rows - r0 : kRows);
    for (int q = 0; q < k; ++q) {
      const float yq = ftz(y[q]);
      for (int i = 0; i < nr; ++i) level[q][i] = ftz(x[(r0 + i) * ldx + q]) * yq;
    }
    int n = k;
    while (n > 1) {
      for (int q = 0; q < n / 2; ++q)
        for (int i = 0; i < nr; ++i) level[q][i] = add_rz(level[2 * q][i], level[2 * q + 1][i]);
      if (n % 2)
        for (int i = 0; i < nr; ++i) level[n / 2][i] = level[n - 1][i];
      n = (n + 1) / 2;
    }
    for (int i = 0; i < nr; ++i) acc[r0 + i] = add_rz(ftz(acc[r0 + i]), level[0][i]);
  }
}

}  // namespace sbp::cudaemu::tc
