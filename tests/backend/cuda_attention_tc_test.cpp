// The CUDA attention kernels on the CPU: the tensor-core ones (src/backend/cuda/attention_tc.cu)
// two ways, the fp32 ones (attention_simt.cu) the second way:
//  - their numerics, replayed: the same key tiles of 32, the same online softmax, and every
//    product taken as the tensor cores take it from split TF32 operands (kernel_math.h
//    tf32_split: hi hi + hi lo + lo hi, 8 terms per step, summed in fp32), against float64
//    attention forward and backward to the op suite's fp32 tolerance, for the engine's operand
//    mix (BF16 q, k, v; F32 dout) and all-F32; a control shows the split is what makes it
//    (every build);
//  - the kernels themselves on the emulated CUDA runtime (STREAMBP_CUDA_EMULATION builds only,
//    src/backend/cuda/emulation/: fibre threads in permuted orders, NaN-filled shared memory,
//    WMMA reading only TF32 bits and checking alignment, device memory the host cannot touch):
//    their indexing, masks, tiling, warps-per-block choices under smaller shared-memory limits
//    than the device's, and synchronisation, against the same float64 reference. The op suite's
//    ".../cuda" cases run them through the backend at the device's own limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/kernel_math.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "support/test_support.h"

#if defined(STREAMBP_CUDA_EMULATION)
#include <cuda_runtime.h>

#include "backend/cuda/attention_args.cuh"
#include "backend/cuda/emulation/emulator.h"
#endif

namespace sbp::cuda {
namespace {

constexpr int kReplayTile = 32;  // attention_tc.cu kBc

struct Dims {
  int H, G, h;
  int64_t n, q_offset, window;
  float scale;
};

// sum_d a[d] b[d] as the tensor cores form it from TF32 operands: per k-step of 8, the small
// terms first, then hi hi (mma_acc's order); `split` false: hi only (the control).
float tc_dot(const float* a, const float* b, int h, bool split) {
  float acc = 0.0f;
  for (int k = 0; k < h; k += 8) {
    float lo_terms = 0.0f, hi_terms = 0.0f;
    for (int d = k; d < k + 8; ++d) {
      const Tf32Split x = tf32_split(a[d]), y = tf32_split(b[d]);
      if (split) lo_terms += x.lo * y.hi + x.hi * y.lo;
      hi_terms += x.hi * y.hi;
    }
    acc += lo_terms;
    acc += hi_terms;
  }
  return acc;
}

struct Grads {
  std::vector<float> out, lse, dq, dk, dv;
};

// q, dout (n, H h); k, v (Tk, G h); seg (Tk).
Grads tc_attention(const Dims& dm, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<float>& dout,
                   const std::vector<int64_t>& seg, bool split) {
  const int H = dm.H, G = dm.G, h = dm.h, group = H / G;
  const int64_t n = dm.n, Tk = static_cast<int64_t>(seg.size());
  const int64_t ldq = int64_t{H} * h, ldkv = int64_t{G} * h;
  Grads g;
  g.out.assign(static_cast<size_t>(n * ldq), 0.0f);
  g.lse.assign(static_cast<size_t>(n * H), 0.0f);
  g.dq.assign(g.out.size(), 0.0f);
  g.dk.assign(static_cast<size_t>(Tk * ldkv), 0.0f);
  g.dv.assign(g.dk.size(), 0.0f);
  std::vector<float> D(static_cast<size_t>(n * H));
  auto S = [&](int64_t r, int hq, int64_t j) {  // scale q_r k_j
    return dm.scale * tc_dot(&q[r * ldq + hq * h], &k[j * ldkv + (hq / group) * h], h, split);
  };
  auto dP = [&](int64_t r, int hq, int64_t j) {
    return tc_dot(&dout[r * ldq + hq * h], &v[j * ldkv + (hq / group) * h], h, split);
  };
  auto product = [&](float p, float x) {  // one term of P V, dS K, P^T dout, dS^T q
    const Tf32Split a = tf32_split(p), b = tf32_split(x);
    return split ? (a.lo * b.hi + a.hi * b.lo) + a.hi * b.hi : a.hi * b.hi;
  };
  for (int hq = 0; hq < H; ++hq) {
    const int kv = hq / group;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = dm.q_offset + r, lo = first_key(seg[i], i, dm.window);
      // forward: online softmax over the key tiles
      float m = -INFINITY, l = 0.0f;
      std::vector<float> o(h, 0.0f);
      for (int64_t k0 = lo / kReplayTile * kReplayTile; k0 <= i; k0 += kReplayTile) {
        float s[kReplayTile], tmax = -INFINITY;
        for (int c = 0; c < kReplayTile; ++c) {
          const int64_t j = k0 + c;
          s[c] = (j >= lo && j <= i) ? S(r, hq, j) : -INFINITY;
          tmax = std::max(tmax, s[c]);
        }
        const float m_new = std::max(m, tmax), corr = rescale(m, m_new);
        float psum = 0.0f;
        for (float& x : s) {
          x = x == -INFINITY ? 0.0f : std::exp(x - m_new);
          psum += x;
        }
        l = l * corr + psum;
        m = m_new;
        for (int d = 0; d < h; ++d) {
          float acc = o[d] * corr;
          for (int c = 0; c < kReplayTile; ++c) {
            const int64_t j = std::min(k0 + c, Tk - 1);
            acc += product(s[c], v[j * ldkv + kv * h + d]);
          }
          o[d] = acc;
        }
      }
      for (int d = 0; d < h; ++d) g.out[r * ldq + hq * h + d] = o[d] / l;
      const float L = m + std::log(l);
      g.lse[r * H + hq] = L;
      // backward, D from P and dP (the BF16-out path), then dS
      float dsum = 0.0f;
      for (int64_t j = lo; j <= i; ++j) dsum += std::exp(S(r, hq, j) - L) * dP(r, hq, j);
      D[r * H + hq] = dsum;
      for (int d = 0; d < h; ++d) {
        float acc = 0.0f;
        for (int64_t j = lo; j <= i; ++j) {
          const float ds = attn_ds(std::exp(S(r, hq, j) - L), dP(r, hq, j), dsum);
          acc += product(ds, k[j * ldkv + kv * h + d]);
        }
        g.dq[r * ldq + hq * h + d] = dm.scale * acc;
      }
    }
  }
  // dK, dV: per key, the rows that see it, head by head of its group (tc_dkdv_kernel's order)
  for (int kv = 0; kv < G; ++kv)
    for (int64_t j = 0; j < Tk; ++j)
      for (int d = 0; d < h; ++d) {
        float dk = 0.0f, dv = 0.0f;
        for (int hq = kv * group; hq < (kv + 1) * group; ++hq)
          for (int64_t r = 0; r < n; ++r) {
            const int64_t i = dm.q_offset + r;
            if (j > i || j < first_key(seg[i], i, dm.window)) continue;
            const float L = g.lse[r * H + hq];
            const float p = std::exp(S(r, hq, j) - L);
            const float ds = attn_ds(p, dP(r, hq, j), D[r * H + hq]);
            dv += product(p, dout[r * ldq + hq * h + d]);
            dk += product(ds, q[r * ldq + hq * h + d]);
          }
        g.dk[j * ldkv + kv * h + d] = dm.scale * dk;
        g.dv[j * ldkv + kv * h + d] = dv;
      }
  return g;
}

struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};

Ref reference(const Dims& dm, const std::vector<float>& q, const std::vector<float>& k,
              const std::vector<float>& v, const std::vector<float>& dout,
              const std::vector<int64_t>& seg) {
  const int H = dm.H, G = dm.G, h = dm.h, group = H / G;
  const int64_t n = dm.n, Tk = static_cast<int64_t>(seg.size());
  const int64_t ldq = int64_t{H} * h, ldkv = int64_t{G} * h;
  Ref f;
  f.out.assign(static_cast<size_t>(n * ldq), 0.0);
  f.lse.assign(static_cast<size_t>(n * H), 0.0);
  f.dq.assign(f.out.size(), 0.0);
  f.dk.assign(static_cast<size_t>(Tk * ldkv), 0.0);
  f.dv.assign(f.dk.size(), 0.0);
  for (int hq = 0; hq < H; ++hq) {
    const int kv = hq / group;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t i = dm.q_offset + r, lo = first_key(seg[i], i, dm.window);
      std::vector<double> s, p, dp;
      double mx = -INFINITY;
      for (int64_t j = lo; j <= i; ++j) {
        double x = 0, y = 0;
        for (int d = 0; d < h; ++d) {
          x += double{q[r * ldq + hq * h + d]} * k[j * ldkv + kv * h + d];
          y += double{dout[r * ldq + hq * h + d]} * v[j * ldkv + kv * h + d];
        }
        s.push_back(dm.scale * x);
        dp.push_back(y);
        mx = std::max(mx, s.back());
      }
      double z = 0;
      for (double x : s) z += std::exp(x - mx);
      const double L = mx + std::log(z);
      f.lse[r * H + hq] = L;
      double D = 0;
      for (size_t t = 0; t < s.size(); ++t) {
        p.push_back(std::exp(s[t] - L));
        D += p[t] * dp[t];
      }
      for (size_t t = 0; t < s.size(); ++t) {
        const int64_t j = lo + static_cast<int64_t>(t);
        const double ds = p[t] * (dp[t] - D);
        for (int d = 0; d < h; ++d) {
          f.out[r * ldq + hq * h + d] += p[t] * v[j * ldkv + kv * h + d];
          f.dq[r * ldq + hq * h + d] += dm.scale * ds * k[j * ldkv + kv * h + d];
          f.dk[j * ldkv + kv * h + d] += dm.scale * ds * q[r * ldq + hq * h + d];
          f.dv[j * ldkv + kv * h + d] += p[t] * dout[r * ldq + hq * h + d];
        }
      }
    }
  }
  return f;
}

std::vector<float> randn(Rng& rng, int64_t count, bool bf16) {
  std::vector<float> x(static_cast<size_t>(count));
  for (float& e : x) {
    e = rng.normal();
    if (bf16) e = bf16_to_f32(f32_to_bf16(e));
  }
  return x;
}

// Worst max-relative error of out, lse, dq, dk, dv against float64.
double worst_error(const Dims& dm, bool qkv_bf16, bool split) {
  Rng rng(11, "tc attention");
  const int64_t Tk = dm.q_offset + dm.n;
  const std::vector<float> q = randn(rng, dm.n * dm.H * dm.h, qkv_bf16),
                           k = randn(rng, Tk * dm.G * dm.h, qkv_bf16),
                           v = randn(rng, Tk * dm.G * dm.h, qkv_bf16),
                           dout = randn(rng, dm.n * dm.H * dm.h, false);
  std::vector<int64_t> seg(static_cast<size_t>(Tk));
  for (int64_t i = 0; i < Tk; ++i) seg[i] = i < 30 ? 0 : (i < 90 ? 30 : 90);
  const Grads g = tc_attention(dm, q, k, v, dout, seg, split);
  const Ref f = reference(dm, q, k, v, dout, seg);
  return std::max({test::rel_err_f64(g.out, f.out), test::rel_err_f64(g.lse, f.lse),
                   test::rel_err_f64(g.dq, f.dq), test::rel_err_f64(g.dk, f.dk),
                   test::rel_err_f64(g.dv, f.dv)});
}

constexpr double kFp32Tol = 1e-5;  // the op suite's attention tolerance for F32 results

TEST(CudaAttentionTc, SplitTf32ProductsGiveFp32Results) {
  for (int64_t window : {int64_t{0}, int64_t{37}}) {
    const Dims dm{4, 2, 32, 70, 50, window, 1.0f / std::sqrt(32.0f)};
    EXPECT_LT(worst_error(dm, /*qkv_bf16=*/true, /*split=*/true), kFp32Tol) << "window " << window;
    EXPECT_LT(worst_error(dm, /*qkv_bf16=*/false, /*split=*/true), kFp32Tol) << "window " << window;
  }
}

TEST(CudaAttentionTc, PlainTf32OperandsWouldNotBeExact) {
  const Dims dm{4, 2, 32, 70, 50, 0, 1.0f / std::sqrt(32.0f)};
  EXPECT_GT(worst_error(dm, true, /*split=*/false), 10 * kFp32Tol);
}

TEST(CudaAttentionTc, Tf32SplitIsExactForBf16AndCloseForF32) {
  Rng rng(12);
  for (int t = 0; t < 1000; ++t) {
    const float x = rng.normal() * std::exp2(static_cast<float>(t % 40 - 20));
    const float b = bf16_to_f32(f32_to_bf16(x));
    EXPECT_EQ(tf32_split(b).hi, b);  // a BF16 value is a TF32 value
    EXPECT_EQ(tf32_split(b).lo, 0.0f);
    const Tf32Split s = tf32_split(x);
    EXPECT_EQ(f32_bits(s.hi) & 0x1fffu, 0u);  // TF32: the low 13 bits are zero
    EXPECT_EQ(f32_bits(s.lo) & 0x1fffu, 0u);
    EXPECT_LE(std::fabs(double{s.hi} + s.lo - x), std::ldexp(std::fabs(x), -22));
  }
  EXPECT_EQ(tf32_round(INFINITY), INFINITY);
  EXPECT_TRUE(std::isnan(tf32_round(NAN)));
}

// ---- the kernels, emulated ----
#if defined(STREAMBP_CUDA_EMULATION)

void cuda_ok(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

// One tensor in emulated device memory, F32 or BF16, behind an FPtr; values() downloads it
// (a synchronous copy: the queued kernels run first).
template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(const std::vector<T>& host) : count(host.size()) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(count, 1) * sizeof(T)));
    cuda_ok(cudaMemcpy(p, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
  std::vector<T> download() const {
    std::vector<T> host(count);
    cuda_ok(cudaMemcpy(host.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

struct DeviceTensor {
  bool bf16;
  DeviceBuffer<float> f32;
  DeviceBuffer<uint16_t> b16;
  static std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> b;
    for (float x : v) b.push_back(f32_to_bf16(x));
    return b;
  }
  DeviceTensor(const std::vector<float>& v, bool as_bf16)
      : bf16(as_bf16),
        f32(as_bf16 ? std::vector<float>() : v),
        b16(as_bf16 ? to_bf16(v) : std::vector<uint16_t>()) {}
  FPtr ptr() const { return FPtr{bf16 ? static_cast<void*>(b16.p) : f32.p, bf16}; }
  std::vector<float> values() const {
    if (!bf16) return f32.download();
    std::vector<float> v;
    for (uint16_t b : b16.download()) v.push_back(bf16_to_f32(b));
    return v;
  }
};

// |got - ref| within the op suite's rule: fp32_tol * max|ref| for F32 storage, plus 2^-8 |ref|
// for BF16 (the fp32 result rounded once).
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, bool bf16,
                  const char* what) {
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  double worst = 0;  // error / allowance; NaN counts as infinite
  for (size_t i = 0; i < ref.size(); ++i) {
    const double allowed = (bf16 ? std::ldexp(std::fabs(ref[i]), -8) : 0.0) + kFp32Tol * scale;
    const double ratio = std::fabs(got[i] - ref[i]) / allowed;
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? INFINITY : ratio;
  }
  EXPECT_LT(worst, 1.0) << what << ": worst error / allowed";
}

struct EmulatedCase {
  Dims dm;
  bool act_bf16;    // q, k, v, out BF16 (the engine's mix), else F32
  bool grads_bf16;  // dq, dk, dv BF16
  size_t smem_limit;
  bool tensor_cores = true;  // attention_tc.cu, else attention_simt.cu
};

// Forward and backward through tc_attention_forward / tc_attention_backward on host memory.
void check_emulated(const EmulatedCase& c) {
  const Dims& dm = c.dm;
  Rng rng(21, "tc attention emulated");
  const int64_t Tk = dm.q_offset + dm.n, Hh = int64_t{dm.H} * dm.h, Gh = int64_t{dm.G} * dm.h;
  const std::vector<float> qv = randn(rng, dm.n * Hh, true), kv = randn(rng, Tk * Gh, true),
                           vv = randn(rng, Tk * Gh, true), dov = randn(rng, dm.n * Hh, false);
  auto grad0 = [&](int64_t count) { return randn(rng, count, true); };  // bf16-representable
  const std::vector<float> dq0 = grad0(dm.n * Hh), dk0 = grad0(Tk * Gh), dv0 = grad0(Tk * Gh);
  std::vector<int64_t> seg(static_cast<size_t>(Tk));
  for (int64_t i = 0; i < Tk; ++i) seg[i] = i < 30 ? 0 : (i < 90 ? 30 : 90);
  const std::vector<int32_t> seg32(seg.begin(), seg.end());
  DeviceTensor q(qv, c.act_bf16), k(kv, c.act_bf16), v(vv, c.act_bf16), dout(dov, false);
  DeviceTensor out(std::vector<float>(static_cast<size_t>(dm.n * Hh), 0.0f), c.act_bf16);
  DeviceTensor dq(dq0, c.grads_bf16), dk(dk0, c.grads_bf16), dv(dv0, c.grads_bf16);
  const std::vector<float> nan_rows(static_cast<size_t>(dm.n * dm.H), NAN);  // written first
  DeviceBuffer<float> lse(nan_rows), D(nan_rows);
  DeviceBuffer<int32_t> seg_dev(seg32);
  AttnArgs a{};
  a.q = q.ptr();
  a.k = k.ptr();
  a.v = v.ptr();
  a.out = out.ptr();
  a.dout = dout.ptr();
  a.dq = dq.ptr();
  a.dk = dk.ptr();
  a.dv = dv.ptr();
  a.lse = lse.p;
  a.D = D.p;
  a.seg = seg_dev.p;
  a.n = dm.n;
  a.q_offset = dm.q_offset;
  a.window = dm.window;
  a.H = dm.H;
  a.G = dm.G;
  a.h = dm.h;
  a.scale = dm.scale;
  ASSERT_TRUE(c.tensor_cores ? tc_attention_supported(dm.h, c.smem_limit)
                             : simt_attention_supported(dm.h));
  cudaemu::reset_errors();
  if (c.tensor_cores)
    tc_attention_forward(a, c.smem_limit, nullptr);
  else
    simt_attention_forward(a, nullptr);
  const Ref ref = reference(dm, qv, kv, vv, dov, seg);
  expect_close(out.values(), ref.out, c.act_bf16, "out");
  expect_close(lse.download(), ref.lse, false, "lse");
  const bool d_from_p = c.act_bf16;  // attention.cu's rule
  if (!d_from_p) attention_delta_from_out(a, nullptr);
  if (c.tensor_cores)
    tc_attention_backward(a, d_from_p, c.smem_limit, nullptr);
  else
    simt_attention_backward(a, d_from_p, nullptr);
  auto plus = [](const std::vector<float>& x0, const std::vector<double>& g) {
    std::vector<double> r(g.size());
    for (size_t i = 0; i < g.size(); ++i) r[i] = x0[i] + g[i];
    return r;
  };
  expect_close(dq.values(), plus(dq0, ref.dq), c.grads_bf16, "dq");
  expect_close(dk.values(), plus(dk0, ref.dk), c.grads_bf16, "dk");
  expect_close(dv.values(), plus(dv0, ref.dv), c.grads_bf16, "dv");
  cuda_ok(cudaDeviceSynchronize());
  if (c.tensor_cores) {
    EXPECT_LE(cudaemu::counters().max_dynamic_smem, c.smem_limit);
  }
}

// h = 32 (ld 36) under three shared-memory limits: 227 KiB (H100/H200: 4 warps in every
// kernel), 40,000 bytes (forward 4 warps, the backward kernels 2), 24,000 bytes (forward 2,
// backward 1): every block shape the kernels choose between.
TEST(CudaAttentionTcEmulated, KernelsMatchFloat64AtEveryBlockShape) {
  const float scale = 1.0f / std::sqrt(32.0f);
  for (size_t limit : {size_t{232448}, size_t{40000}, size_t{24000}})
    for (bool act_bf16 : {true, false}) {
      SCOPED_TRACE("smem " + std::to_string(limit) + (act_bf16 ? " bf16 q k v out" : " f32"));
      check_emulated({{4, 2, 32, 70, 50, 0, scale}, act_bf16, false, limit});
    }
}

TEST(CudaAttentionTcEmulated, WindowsGqaBf16GradientsAndTileEdges) {
  // A window shorter than a key tile and a segment; MQA; head_dim 16 with BF16 gradients
  // (each element added once per call, so rounded once).
  // window 20: row 50 (a block's first row) sees keys from 31, the last key of a tile.
  check_emulated({{4, 2, 32, 70, 50, 20, 1.0f / std::sqrt(32.0f)}, true, false, 232448});
  check_emulated({{4, 1, 32, 70, 50, 37, 1.0f / std::sqrt(32.0f)}, true, false, 40000});
  check_emulated({{2, 2, 16, 100, 20, 0, 0.25f}, true, true, 232448});
  // q_offset 17: a query tile of the dK/dV kernel ends exactly on a warp's first key (row 48,
  // key 48: one diagonal pair in the tile for that warp).
  check_emulated({{4, 2, 32, 70, 17, 0, 1.0f / std::sqrt(32.0f)}, false, false, 232448});
}

// The fp32 CUDA-core kernels (attention_simt.cu): the head dims the tensor cores do not take
// (8, 12, 24: the HF fixtures' small models) and one they do, F32 and the BF16 mix, windows.
TEST(CudaAttentionTcEmulated, SimtKernelsMatchFloat64) {
  for (int h : {8, 12, 24})
    for (bool act_bf16 : {true, false}) {
      SCOPED_TRACE("h " + std::to_string(h) + (act_bf16 ? " bf16 q k v out" : " f32"));
      check_emulated({{2, 1, h, 40, 50, 0, 1.0f / std::sqrt(static_cast<float>(h))},
                      act_bf16,
                      false,
                      0,
                      false});
    }
  check_emulated({{4, 1, 32, 40, 50, 20, 1.0f / std::sqrt(32.0f)}, true, false, 0, false});
  check_emulated({{2, 2, 16, 40, 17, 7, 0.25f}, false, true, 0, false});
}

#endif  // STREAMBP_CUDA_EMULATION

}  // namespace
}  // namespace sbp::cuda
