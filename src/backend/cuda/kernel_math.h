#pragma once
// The arithmetic of the CUDA kernels, one small function per element or row step, usable from
// device code and from plain C++ (core/host_device.h). The kernels (*.cu) only index and launch;
// everything that decides a number is here, and tests/backend/cuda_math_test.cpp checks it against
// float64 references on the CPU.
//
// Semantics are the contract's (backend/backend.h); where a formula matches a CPU kernel the
// comment names it. fp32 arithmetic throughout (fp64 where the contract asks for it).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/adamw_math.h"
#include "core/host_device.h"

namespace sbp::cuda {

// ---- BF16 storage: the upper 16 bits of an fp32 value ----

SBP_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
SBP_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
// Exact widening.
SBP_HD float bf16_to_float(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
// Round to nearest even; NaN stays a quiet NaN. Same bits as core/dtype.h f32_to_bf16, which
// the CPU backend uses, so both backends store the same BF16 for the same fp32 value.
SBP_HD uint16_t float_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// ---- RMSNorm (cpu/norm.cpp): x viewed as (rows, d) ----

// 1 / sqrt(sum_sq / d + eps), sum_sq = sum_j x_j^2 accumulated in fp32.
SBP_HD float rms_rstd(float sum_sq, int64_t d, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(d) + eps);
}
// dx_j contribution: r * (dy_j g_j - xh_j * mean), mean = sum_j dy_j g_j xh_j / d.
SBP_HD float rms_dx(float r, float dy, float g, float xh, float mean) {
  return r * (dy * g - xh * mean);
}

// ---- rotary embedding (cpu/rope.cpp): rotate the pair (a, b) by the angle (c, s) ----
// sign = +1 forward, -1 the inverse rotation (backward).
struct Pair {
  float a, b;
};
SBP_HD Pair rope_rotate(float a, float b, float c, float s, float sign) {
  const float ss = sign * s;
  return Pair{a * c - b * ss, b * c + a * ss};
}

// ---- SwiGLU (cpu/swiglu.cpp) ----
SBP_HD float sigmoidf_(float z) { return 1.0f / (1.0f + expf(-z)); }
SBP_HD float swiglu(float gate, float up) { return gate * sigmoidf_(gate) * up; }
// d/dgate and d/dup of silu(gate) * up, times dout.
SBP_HD Pair swiglu_grad(float dout, float gate, float up) {
  const float sig = sigmoidf_(gate);
  return Pair{dout * up * sig * (1.0f + gate * (1.0f - sig)), dout * gate * sig};
}

// ---- Gemma's ops (backend.h after the Gemma branch merges: geglu, softcap) ----
// gelu_tanh(z) = 0.5 z (1 + tanh(c (z + 0.044715 z^3))), c = sqrt(2 / pi): PyTorch's
// gelu(approximate="tanh").
constexpr float kGeluC = 0.7978845608028654f;
SBP_HD float gelu_tanh(float z) {
  return 0.5f * z * (1.0f + tanhf(kGeluC * (z + 0.044715f * z * z * z)));
}
SBP_HD float gelu_tanh_grad(float z) {
  const float t = tanhf(kGeluC * (z + 0.044715f * z * z * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * z * z);
}
// d/dgate and d/dup of gelu_tanh(gate) * up, times dout.
SBP_HD Pair geglu_grad(float dout, float gate, float up) {
  return Pair{dout * up * gelu_tanh_grad(gate), dout * gelu_tanh(gate)};
}
// Logit soft-capping y = cap tanh(x / cap); its backward from y: dx = dy (1 - (y / cap)^2).
SBP_HD float softcap(float x, float cap) { return cap * tanhf(x / cap); }
SBP_HD float softcap_grad_from_y(float dy, float y, float cap) {
  const float r = y / cap;
  return dy * (1.0f - r * r);
}

// ---- AdamW: backend/adamw_math.h (shared with the CPU kernel and the host optimizer) ----

// ---- online softmax (attention forward, log-softmax of a logits row) ----
// Running (max, sum of exp(x - max)). Merging is associative up to rounding; the kernels merge
// in a fixed order (a fixed tree within a block), so results are reproducible.
struct MaxSum {
  float m;  // running max (-inf: nothing seen)
  float s;  // sum of exp(x - m)
};
SBP_HD MaxSum maxsum_empty() { return MaxSum{-INFINITY, 0.0f}; }
SBP_HD MaxSum maxsum_add(MaxSum a, float x) {
  if (x == -INFINITY) return a;
  if (x <= a.m) return MaxSum{a.m, a.s + expf(x - a.m)};
  return MaxSum{x, a.s * expf(a.m - x) + 1.0f};  // a.m = -inf gives 0 * 0 + 1
}
SBP_HD MaxSum maxsum_merge(MaxSum a, MaxSum b) {
  if (b.m == -INFINITY) return a;
  if (a.m == -INFINITY) return b;
  if (a.m >= b.m) return MaxSum{a.m, a.s + b.s * expf(b.m - a.m)};
  return MaxSum{b.m, b.s + a.s * expf(a.m - b.m)};
}
// Rescale factor of an accumulator when the max moves from m_old to m_new (m_old = -inf: 0).
SBP_HD float rescale(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
}

// ---- TF32 operands (attention_tc.cu) ----
// The tensor cores' fp32-input format keeps 10 explicit mantissa bits: x rounded to nearest
// (ties away from zero, as cvt.rna.tf32.f32) with the low 13 bits zero; inf and NaN pass.
SBP_HD float tf32_round(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  return bits_f32((u + 0x1000u) & 0xffffe000u);
}
// x = hi + lo + e with hi, lo TF32 and |e| <= 2^-22 |x| (hi's error is exact in fp32, and lo
// rounds it to 11 bits). A product a b of two split operands is taken as
// a_hi b_hi + a_hi b_lo + a_lo b_hi (each exact in fp32): within about 2^-21 |a b|, fp32's
// accuracy for the sums attention takes. BF16 values are TF32 values: their lo is 0.
struct Tf32Split {
  float hi, lo;
};
SBP_HD Tf32Split tf32_split(float x) {
  const float hi = tf32_round(x);
  return Tf32Split{hi, tf32_round(x - hi)};
}

// ---- attention masks (backend.h): row i sees keys [first_key(i), i] ----
// first_key = max(seg_start[i], i - window + 1) with a window, else seg_start[i]. Non-decreasing
// in i for valid segment starts (both terms are), which the tile loops rely on.
SBP_HD int64_t first_key(int64_t seg_start_i, int64_t i, int64_t window) {
  if (window > 0 && i - window + 1 > seg_start_i) return i - window + 1;
  return seg_start_i;
}
// The contract's condition on segment starts, row r (q_offset <= r), prev = seg_start[r-1].
SBP_HD bool seg_start_ok(int64_t s, int64_t r, int64_t prev, bool first_row) {
  return s >= 0 && s <= r && (first_row || s >= prev);
}
// dS of one (query, key) pair from the probability and dP = dout . v: P (dP - D).
SBP_HD float attn_ds(float p, float dp, float D) { return p * (dp - D); }

// ---- LM head (cpu/lm_head.cpp, cpu/entropy.cpp), per logit ----
// dL/dlogit_j = dlogp (onehot_j - p_j): the target's +dlogp is added by dlogits_value below so
// that a BF16 logit is rounded once.
SBP_HD float dlogits_value(float z, float lse, float w, bool is_target) {
  const float g = -w * expf(z - lse);
  return is_target ? g + w : g;
}
// Entropy term of one logit: p_j (lse - z_j) >= 0.
SBP_HD float entropy_term(float z, float lse) {
  const float nlogp = lse - z;
  return expf(-nlogp) * nlogp;
}
// dlogp (onehot_j - p_j) + dentropy p_j (lse - z_j - H).
SBP_HD float dlogits_entropy_value(float z, float lse, float w, float H, float e, bool is_target) {
  const float nlogp = lse - z;
  const float g = expf(-nlogp) * (-w + e * (nlogp - H));
  return is_target ? g + w : g;
}

}  // namespace sbp::cuda
