#pragma once
// Normal random numbers from a counter (Backend::fill_normal): number i of stream (seed, stream)
// is a pure function of (seed, stream, i). So a tensor is filled in parallel (a thread per
// element on a GPU) and in pieces (element i of a piece at offset o is number o + i), and every
// backend gives the same values: the CPU backend and the CUDA kernel evaluate this one SBP_HD
// definition, which uses integer operations, IEEE double additions, multiplications,
// divisions and square roots (correctly rounded on both), and explicit fused multiply-adds only.
// No library log or cos (libm's and CUDA's differ in the last bit), and no a * b + c written
// plainly (a compiler may fuse it on one side and not the other).
//
// Bits: SplitMix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014) applied to key + n * gamma, n = 128 i + draw: SplitMix64 itself,
// 128 draws per number. A number is Marsaglia's polar method: pairs (x, y) uniform in [-1, 1)
// with 53 bits each until s = x^2 + y^2 lies in (0, 1) (78.5% of pairs; at most 63 tries, the
// last needed with probability 0.215^63 < 1e-42, and then the value 0), and x sqrt(-2 ln s / s).
// ln s = e ln 2 + 2 atanh((m - 1) / (m + 1)) for s = m 2^e, m in [sqrt(1/2), sqrt(2)), the
// series to 13 terms (the last below 2^-60 of the sum).
//
// Not Rng (core/rng.h): the host's sequential generator, whose draws for every existing fixture
// and golden number stay as they are; only `bench`'s random models (model/device_init.h) use
// this one.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace sbp {

SBP_HD uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The key of stream `stream` under `seed`.
SBP_HD uint64_t counter_normal_key(uint64_t seed, uint64_t stream) {
  return splitmix64_mix(splitmix64_mix(seed + 0x9e3779b97f4a7c15ull) +
                        stream * 0xd1b54a32d192ed03ull);
}

// ln s for s > 0, a normal double (the pairs' s >= 2^-104).
SBP_HD double counter_normal_log(double s) {
  uint64_t bits;
  std::memcpy(&bits, &s, 8);
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m;
  std::memcpy(&m, &bits, 8);
  if (m > 1.4142135623730951) {  // sqrt(2): m / 2 is exact
    m *= 0.5;
    ++e;
  }
  const double f = (m - 1.0) / (m + 1.0);  // m - 1 exact (Sterbenz); |f| <= 0.1716
  const double t = f * f;
  double p = 1.0 / 25;
  p = fma(p, t, 1.0 / 23);
  p = fma(p, t, 1.0 / 21);
  p = fma(p, t, 1.0 / 19);
  p = fma(p, t, 1.0 / 17);
  p = fma(p, t, 1.0 / 15);
  p = fma(p, t, 1.0 / 13);
  p = fma(p, t, 1.0 / 11);
  p = fma(p, t, 1.0 / 9);
  p = fma(p, t, 1.0 / 7);
  p = fma(p, t, 1.0 / 5);
  p = fma(p, t, 1.0 / 3);
  p = fma(p, t, 1.0);
  const double two_f = 2.0 * f;  // exact
  return fma(static_cast<double>(e), 0.6931471805599453, two_f * p);
}

// Number i of the stream with key `key`: a standard normal value (as a double).
SBP_HD double counter_normal(uint64_t key, uint64_t i) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const uint64_t base = key + (i << 7) * kGamma;
  for (uint64_t draw = 0; draw < 126; draw += 2) {
    // Uniform in [-1, 1): 53 random bits, then an exact subtraction and an exact scaling.
    const int64_t ux = static_cast<int64_t>(splitmix64_mix(base + (draw + 1) * kGamma) >> 11);
    const int64_t uy = static_cast<int64_t>(splitmix64_mix(base + (draw + 2) * kGamma) >> 11);
    const double x = static_cast<double>(ux - (int64_t{1} << 52)) * 0x1p-52;
    const double y = static_cast<double>(uy - (int64_t{1} << 52)) * 0x1p-52;
    const double s = fma(x, x, y * y);
    if (s >= 1.0 || s == 0.0) continue;
    return x * sqrt(-2.0 * counter_normal_log(s) / s);
  }
  return 0.0;
}

// mean + std * N, rounded once to float: the value Backend::fill_normal stores (before a BF16
// tensor's rounding).
SBP_HD float counter_normal_value(uint64_t key, uint64_t i, float mean, float std) {
  return static_cast<float>(
      fma(static_cast<double>(std), counter_normal(key, i), static_cast<double>(mean)));
}

}  // namespace sbp
