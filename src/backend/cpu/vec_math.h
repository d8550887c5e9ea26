#pragma once
// Float math that GCC can vectorize. glibc's expf is a function call that the vectorizer will
// not touch without -ffast-math (which we do not use: it would break reproducibility and NaN
// handling), so softmax-type loops need an inline exp made of plain arithmetic and bit moves.
// Written as scalar functions: inlined into a simple loop they become AVX2/NEON code.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace sbp::cpu {

// a * b + c with one rounding where the target has FMA, else two. Spelled out rather than left
// to -ffp-contract: GCC contracts a * b + c in some inlining contexts and not in others, and a
// kernel that promises the same bits for the same element wherever it is computed (see
// attention.cpp) cannot have that. std::fma becomes one instruction, and vectorizes, only when
// the target has FMA; without it, it would be a slow exact libm call, hence the fallback.
inline float fmadd(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(x) for fp32, relative error below 1e-7 (about 1 ulp) over the whole normal range.
//  - Cody-Waite range reduction: x = n*ln2 + r, |r| <= ln2/2, with ln2 split in a part whose
//    product with n is exact (ln2_hi has 9 significant bits) and a small correction;
//  - exp(r) = 1 + r + r^2 * P(r), P of degree 5 (the Cephes expf coefficients);
//  - 2^n built in the exponent bits, as two factors 2^(n/2) * 2^(n - n/2) so that every n in
//    [-126, 128] stays a normal float (a single factor would overflow at n = 128).
// Special values: x < -87.33654 (where exp(x) leaves the normal range) gives 0, which is what
// softmax wants, and so does -inf; x > 88.72284 gives +inf; NaN gives NaN; exp(0) == 1 exactly.
//
// Why it looks the way it does: GCC only vectorizes a loop around this if there is no control
// flow left after inlining, and under the default -ftrapping-math it will not turn a float
// `?:` whose operands it has sunk into branches back into a blend. So the arithmetic runs on
// every input, in range or not (garbage lanes are harmless: unsigned integer arithmetic, no
// UB), and the out-of-range lanes are fixed up at the end with integer masks.
inline float exp_f32(float x) {
  constexpr float kMinArg = -87.33654f;   // ~ln(FLT_MIN)
  constexpr float kMaxArg = 88.7228394f;  // ~ln(FLT_MAX)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  // 1.5 * 2^23: adding it rounds to an integer (round-to-nearest) and leaves that integer in
  // the low mantissa bits; valid for |x * log2e| < 2^22, i.e. for every x not fixed up below.
  constexpr float kShifter = 12582912.0f;

  const float t = fmadd(x, kLog2e, kShifter);
  const float n = t - kShifter;  // round(x * log2e), exact
  float r = fmadd(-n, kLn2Hi, x);
  r = fmadd(-n, kLn2Lo, r);
  float p = 1.9875691500e-4f;
  p = fmadd(p, r, 1.3981999507e-3f);
  p = fmadd(p, r, 8.3334519073e-3f);
  p = fmadd(p, r, 4.1665795894e-2f);
  p = fmadd(p, r, 1.6666665459e-1f);
  p = fmadd(p, r, 5.0000001201e-1f);
  const float y = fmadd(p, r * r, r) + 1.0f;
  // n as an integer: the low mantissa bits of t minus those of the shifter.
  const uint32_t nu = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kShifter);
  const uint32_t n1 = static_cast<uint32_t>(static_cast<int32_t>(nu) >> 1);  // floor(n / 2)
  const uint32_t n2 = nu - n1;
  const float s1 = std::bit_cast<float>((n1 + 127u) << 23);  // 2^n1
  const float s2 = std::bit_cast<float>((n2 + 127u) << 23);  // 2^n2
  const float e = y * s1 * s2;
  // Fix-ups as masks (see above): underflow and -inf -> +0, overflow and +inf -> +inf.
  const uint32_t under = 0u - static_cast<uint32_t>(x < kMinArg);
  const uint32_t over = 0u - static_cast<uint32_t>(x > kMaxArg);
  uint32_t bits = std::bit_cast<uint32_t>(e) & ~under;
  bits = (bits & ~over) | (0x7f800000u & over);
  return std::bit_cast<float>(bits);
}

// Lanes of an unrolled reduction: sixteen fill one AVX-512 or two AVX2 registers, so a fixed
// lane layout vectorizes the same way, in the same order, on every x86 build.
constexpr int64_t kLanes = 16;

// max(init, f(0), ..., f(n-1)) in kLanes independent lanes: GCC does not vectorize a std::max
// chain on floats without -ffinite-math-only, so the plain loop runs one compare at a time. A
// max is exact, so the lanes give the scalar loop's result; a NaN f(j) is skipped by both
// (std::max(m, NaN) == m).
template <class F>
inline float lane_max(int64_t n, float init, F f) {
  float acc[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) acc[l] = init;
  const int64_t body = n - n % kLanes;
  for (int64_t j = 0; j < body; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], f(j + l));
  for (int64_t j = body; j < n; ++j) acc[j - body] = std::max(acc[j - body], f(j));
  for (int64_t width = kLanes / 2; width > 0; width /= 2)
    for (int64_t l = 0; l < width; ++l) acc[l] = std::max(acc[l], acc[l + width]);
  return acc[0];
}

}  // namespace sbp::cpu
