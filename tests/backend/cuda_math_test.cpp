// The arithmetic of the CUDA kernels (src/backend/cuda/kernel_math.h, gemm_plan.h), run on the
// CPU against float64 references: what a CUDA kernel computes per element or row step is tested
// here on every machine; only the kernels' indexing and launch need a GPU (the op suite's
// ".../cuda" cases, label `gpu`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/kernel_math.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "support/test_support.h"

namespace sbp::cuda {
namespace {

std::vector<double> randn(Rng& rng, int n, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(static_cast<float>(scale * rng.normal()));
  return v;
}

TEST(CudaMath, Bf16ConversionsAreTheCoreOnes) {
  Rng rng(1);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 1e-40f, -1e-45f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::max(), 3.0e38f};
  // Ties: 1 + 2^-8 (even down), 1 + 3 * 2^-8 (odd: up).
  xs.push_back(1.0f + 1.0f / 256.0f);
  xs.push_back(1.0f + 3.0f / 256.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(static_cast<float>(rng.normal() * std::pow(10.0, (i % 20) - 10)));
  for (float x : xs) {
    EXPECT_EQ(float_to_bf16(x), f32_to_bf16(x)) << x;
    const uint16_t b = f32_to_bf16(x);
    const float back = bf16_to_float(b), core = bf16_to_f32(b);
    EXPECT_EQ(std::memcmp(&back, &core, 4), 0) << x;
  }
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256.0f), float_to_bf16(1.0f));
  EXPECT_GT(float_to_bf16(1.0f + 3.0f / 256.0f), float_to_bf16(1.0f + 1.0f / 128.0f) - 1);
}

// rmsnorm forward and backward per row, in the kernels' order, against float64 and against
// central differences of the float64 forward.
TEST(CudaMath, RmsNormRowMatchesFloat64) {
  Rng rng(2);
  const int d = 37;
  const float eps = 1e-6f;
  const std::vector<double> x = randn(rng, d), g = randn(rng, d), dy = randn(rng, d);
  float ss = 0;
  for (double v : x) ss += static_cast<float>(v) * static_cast<float>(v);
  const float r = rms_rstd(ss, d, eps);
  double ss64 = 0;
  for (double v : x) ss64 += v * v;
  const double r64 = 1.0 / std::sqrt(ss64 / d + eps);
  EXPECT_NEAR(r, r64, 1e-6 * r64);
  // Backward: dx_j = r (dy_j g_j - xh_j mean(dy g xh)).
  float dot = 0;
  for (int j = 0; j < d; ++j)
    dot += static_cast<float>(dy[j]) * static_cast<float>(g[j]) * (static_cast<float>(x[j]) * r);
  const float mean = dot / d;
  std::vector<double> dx(d), ref(d);
  for (int j = 0; j < d; ++j)
    dx[j] = rms_dx(r, static_cast<float>(dy[j]), static_cast<float>(g[j]),
                   static_cast<float>(x[j]) * r, mean);
  // d/dx_j of sum_k dy_k g_k x_k r(x), central differences in float64.
  auto loss = [&](std::vector<double> xv) {
    double s = 0;
    for (double v : xv) s += v * v;
    const double rr = 1.0 / std::sqrt(s / d + eps);
    double l = 0;
    for (int k = 0; k < d; ++k) l += dy[k] * g[k] * xv[k] * rr;
    return l;
  };
  for (int j = 0; j < d; ++j) {
    std::vector<double> xp = x, xm = x;
    xp[j] += 1e-6;
    xm[j] -= 1e-6;
    ref[j] = (loss(xp) - loss(xm)) / 2e-6;
  }
  EXPECT_LT(test::rel_err_f64(dx, ref), 1e-5);
}

TEST(CudaMath, RopeRotationAndItsInverse) {
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    const float a = static_cast<float>(rng.normal()), b = static_cast<float>(rng.normal());
    const double th = 100.0 * rng.uniform();
    const float c = static_cast<float>(std::cos(th)), s = static_cast<float>(std::sin(th));
    const Pair f = rope_rotate(a, b, c, s, 1.0f);
    EXPECT_NEAR(f.a, a * std::cos(th) - b * std::sin(th), 1e-6);
    EXPECT_NEAR(f.b, b * std::cos(th) + a * std::sin(th), 1e-6);
    const Pair back = rope_rotate(f.a, f.b, c, s, -1.0f);
    EXPECT_NEAR(back.a, a, 1e-5);
    EXPECT_NEAR(back.b, b, 1e-5);
  }
}

TEST(CudaMath, SwigluAndItsGradientMatchFloat64) {
  Rng rng(4);
  for (int i = 0; i < 1000; ++i) {
    const double z = static_cast<float>(4 * rng.normal()), u = static_cast<float>(rng.normal());
    const double dout = static_cast<float>(rng.normal());
    auto f = [](double zz, double uu) { return zz / (1 + std::exp(-zz)) * uu; };
    EXPECT_NEAR(swiglu(static_cast<float>(z), static_cast<float>(u)), f(z, u),
                1e-6 * (1 + std::fabs(f(z, u))));
    const Pair gr = swiglu_grad(static_cast<float>(dout), static_cast<float>(z), static_cast<float>(u));
    const double h = 1e-6;
    const double dz = dout * (f(z + h, u) - f(z - h, u)) / (2 * h);
    const double du = dout * (f(z, u + h) - f(z, u - h)) / (2 * h);
    EXPECT_NEAR(gr.a, dz, 1e-5 * (1 + std::fabs(dz)));
    EXPECT_NEAR(gr.b, du, 1e-5 * (1 + std::fabs(du)));
  }
}

// Gemma's GeGLU and soft-capping (gemma_ops.cu) against float64 and central differences.
TEST(CudaMath, GegluAndSoftcapMatchFloat64) {
  Rng rng(9);
  auto gelu64 = [](double z) {
    return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
  };
  for (int i = 0; i < 1000; ++i) {
    const double z = static_cast<float>(3 * rng.normal()), u = static_cast<float>(rng.normal());
    const double dout = static_cast<float>(rng.normal());
    EXPECT_NEAR(gelu_tanh(static_cast<float>(z)), gelu64(z), 2e-6 * (1 + std::fabs(gelu64(z))));
    const Pair g = geglu_grad(static_cast<float>(dout), static_cast<float>(z), static_cast<float>(u));
    const double h = 1e-6;
    const double dz = dout * u * (gelu64(z + h) - gelu64(z - h)) / (2 * h);
    EXPECT_NEAR(g.a, dz, 1e-5 * (1 + std::fabs(dz)));
    EXPECT_NEAR(g.b, dout * gelu64(z), 1e-5 * (1 + std::fabs(dout * gelu64(z))));
    const double cap = 30.0, x = static_cast<float>(50 * rng.normal());
    const float y = softcap(static_cast<float>(x), static_cast<float>(cap));
    EXPECT_NEAR(y, cap * std::tanh(x / cap), 1e-5 * cap);
    const double dx = dout * (std::tanh((x + h) / cap) - std::tanh((x - h) / cap)) * cap / (2 * h);
    EXPECT_NEAR(softcap_grad_from_y(static_cast<float>(dout), y, static_cast<float>(cap)), dx,
                1e-5 * (1 + std::fabs(dx)));
  }
}

// Five AdamW steps against torch.optim.AdamW's formula in float64.
TEST(CudaMath, AdamWMatchesFloat64) {
  Rng rng(5);
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd = 0.1f;
  for (int i = 0; i < 200; ++i) {
    float p = static_cast<float>(rng.normal()), m = 0, v = 0;
    double p64 = p, m64 = 0, v64 = 0;
    for (int t = 1; t <= 5; ++t) {
      const float g = static_cast<float>(rng.normal());
      p = adamw_update(p, g, &m, &v, adamw_scalars(lr, b1, b2, eps, wd, t));
      p64 *= 1.0 - static_cast<double>(lr) * wd;
      m64 = b1 * m64 + (1.0 - b1) * g;
      v64 = b2 * v64 + (1.0 - b2) * static_cast<double>(g) * g;
      const double mh = m64 / (1.0 - std::pow(static_cast<double>(b1), t));
      const double vh = v64 / (1.0 - std::pow(static_cast<double>(b2), t));
      p64 -= lr * mh / (std::sqrt(vh) + eps);
    }
    EXPECT_NEAR(p, p64, 2e-6 * (1 + std::fabs(p64)));
  }
}

double logsumexp64(const std::vector<double>& x) {
  double m = -INFINITY;
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  return m + std::log(s);
}

// Online (max, sum) in sequence and merged in trees, as the kernels combine them, with -inf
// entries (masked keys) anywhere, against float64 log-sum-exp.
TEST(CudaMath, OnlineSoftmaxMatchesFloat64) {
  Rng rng(6);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 70;
    std::vector<double> x = randn(rng, n, 5.0);
    for (int i = 0; i < n; i += 3) x[i] = -INFINITY;
    x[static_cast<size_t>(n - 1)] = static_cast<float>(rng.normal());  // at least one finite
    MaxSum seq = maxsum_empty();
    for (double v : x) seq = maxsum_add(seq, static_cast<float>(v));
    // Pairwise tree, as a block reduction merges per-thread states.
    std::vector<MaxSum> level;
    for (double v : x) level.push_back(maxsum_add(maxsum_empty(), static_cast<float>(v)));
    while (level.size() > 1) {
      std::vector<MaxSum> up;
      for (size_t i = 0; i < level.size(); i += 2)
        up.push_back(i + 1 < level.size() ? maxsum_merge(level[i], level[i + 1]) : level[i]);
      level = up;
    }
    const double ref = logsumexp64(x);
    EXPECT_NEAR(seq.m + std::log(seq.s), ref, 1e-6 * (1 + std::fabs(ref)));
    EXPECT_NEAR(level[0].m + std::log(level[0].s), ref, 1e-6 * (1 + std::fabs(ref)));
  }
  EXPECT_EQ(rescale(-INFINITY, 3.0f), 0.0f);
  EXPECT_EQ(rescale(2.0f, 2.0f), 1.0f);
  const MaxSum e = maxsum_merge(maxsum_empty(), maxsum_empty());
  EXPECT_EQ(e.m, -INFINITY);
  EXPECT_EQ(e.s, 0.0f);
}

// The attention forward's per-row loop (attention.cu attn_forward_kernel), replayed on the
// host with the same tile walk and mask: key tiles of 32 from the block's first key, online
// softmax with rescaling, against float64 softmax attention; and the backward's dS rows sum to
// zero with D = sum_j P dP.
TEST(CudaMath, AttentionRowStepsMatchFloat64) {
  Rng rng(7);
  const int h = 16, tk = 150;
  const float scale = 0.25f;
  const std::vector<double> K = randn(rng, tk * h), V = randn(rng, tk * h);
  std::vector<int64_t> seg(tk);
  for (int i = 0; i < tk; ++i) seg[i] = i < 40 ? 0 : (i < 97 ? 40 : 97);
  for (int64_t window : {int64_t{0}, int64_t{5}, int64_t{33}}) {
    for (int64_t i : {int64_t{0}, int64_t{39}, int64_t{40}, int64_t{75}, int64_t{149}}) {
      const std::vector<double> q = randn(rng, h);
      const int64_t lo = first_key(seg[i], i, window);
      // float64 reference
      std::vector<double> s64;
      for (int64_t j = lo; j <= i; ++j) {
        double d = 0;
        for (int c = 0; c < h; ++c) d += q[c] * K[j * h + c];
        s64.push_back(scale * d);
      }
      const double lse64 = logsumexp64(s64);
      std::vector<double> out64(h, 0.0);
      for (int64_t j = lo; j <= i; ++j)
        for (int c = 0; c < h; ++c) out64[c] += std::exp(s64[j - lo] - lse64) * V[j * h + c];
      // The kernel's walk.
      float m = -INFINITY, l = 0;
      std::vector<float> acc(h, 0.0f);
      for (int64_t k0 = lo / 32 * 32; k0 <= i; k0 += 32) {
        float s[32], mt = -INFINITY;
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t j = k0 + lane;
          s[lane] = -INFINITY;
          if (j >= lo && j <= i) {
            float d = 0;
            for (int c = 0; c < h; ++c) d += scale * static_cast<float>(q[c]) * static_cast<float>(K[j * h + c]);
            s[lane] = d;
          }
          mt = std::max(mt, s[lane]);
        }
        const float m_new = std::max(m, mt), corr = rescale(m, m_new);
        float psum = 0, p[32];
        for (int lane = 0; lane < 32; ++lane) {
          p[lane] = s[lane] == -INFINITY ? 0.0f : std::exp(s[lane] - m_new);
          psum += p[lane];
        }
        l = l * corr + psum;
        for (int c = 0; c < h; ++c) {
          float o = acc[c] * corr;
          for (int lane = 0; lane < 32; ++lane) {
            const int64_t j = std::min<int64_t>(k0 + lane, tk - 1);
            o += p[lane] * static_cast<float>(V[j * h + c]);
          }
          acc[c] = o;
        }
        m = m_new;
      }
      std::vector<double> out(h);
      for (int c = 0; c < h; ++c) out[c] = acc[c] / l;
      EXPECT_LT(test::rel_err_f64(out, out64), 1e-5) << "window " << window << " row " << i;
      EXPECT_NEAR(m + std::log(l), lse64, 1e-5 * (1 + std::fabs(lse64)));
      // dS = P (dP - D) sums to zero over the row when D = sum_j P dP.
      const std::vector<double> dp = randn(rng, static_cast<int>(s64.size()));
      double D = 0;
      for (size_t j = 0; j < s64.size(); ++j) D += std::exp(s64[j] - lse64) * dp[j];
      double dssum = 0, dsabs = 0;
      for (size_t j = 0; j < s64.size(); ++j) {
        const float ds = attn_ds(static_cast<float>(std::exp(s64[j] - lse64)),
                                 static_cast<float>(dp[j]), static_cast<float>(D));
        dssum += ds;
        dsabs += std::fabs(ds);
      }
      EXPECT_LT(std::fabs(dssum), 1e-6 * (1 + dsabs));
    }
  }
}

TEST(CudaMath, FirstKeyAndSegmentChecks) {
  EXPECT_EQ(first_key(0, 10, 0), 0);     // no window
  EXPECT_EQ(first_key(0, 10, 4), 7);     // itself and 3 before
  EXPECT_EQ(first_key(8, 10, 4), 8);     // the segment starts later than the window
  EXPECT_EQ(first_key(0, 10, 11), 0);    // a window wider than the row's span
  EXPECT_EQ(first_key(5, 5, 1), 5);      // window 1: itself only
  // first_key is non-decreasing in i for valid segment starts, with or without a window.
  const std::vector<int64_t> seg = {0, 0, 0, 3, 3, 5, 5, 5, 5, 9, 9, 9};
  for (int64_t w : {0, 1, 2, 3, 7}) {
    for (size_t i = 1; i < seg.size(); ++i) {
      const int64_t ii = static_cast<int64_t>(i);
      EXPECT_LE(first_key(seg[i - 1], ii - 1, w), first_key(seg[i], ii, w));
      EXPECT_TRUE(seg_start_ok(seg[i], ii, seg[i - 1], false));
    }
  }
  EXPECT_TRUE(seg_start_ok(0, 0, 0, true));
  EXPECT_FALSE(seg_start_ok(-1, 3, 0, true));  // negative
  EXPECT_FALSE(seg_start_ok(4, 3, 0, true));   // after its row
  EXPECT_FALSE(seg_start_ok(2, 3, 3, false));  // decreasing
  EXPECT_TRUE(seg_start_ok(2, 3, 3, true));    // the first checked row has no predecessor
}

// dlogits and the entropy terms of one row against float64: the gradient of
// w * logp_target + e * H(softmax) by central differences, and the entropy itself.
TEST(CudaMath, LmHeadRowGradientsMatchFloat64) {
  Rng rng(8);
  const int V = 50, t = 17;
  const std::vector<double> z = randn(rng, V, 2.0);
  const double w = 0.7, e = -0.3;
  auto lse64 = [&](const std::vector<double>& zz) { return logsumexp64(zz); };
  auto entropy64 = [&](const std::vector<double>& zz) {
    const double l = lse64(zz);
    double H = 0;
    for (double v : zz) H -= std::exp(v - l) * (v - l);
    return H;
  };
  const double l = lse64(z);
  const float lf = static_cast<float>(l);
  float H = 0;
  for (int j = 0; j < V; ++j) H += entropy_term(static_cast<float>(z[j]), lf);
  EXPECT_NEAR(H, entropy64(z), 1e-5);
  auto objective = [&](const std::vector<double>& zz, bool with_entropy) {
    return w * (zz[t] - lse64(zz)) + (with_entropy ? e * entropy64(zz) : 0.0);
  };
  for (bool with_entropy : {false, true}) {
    std::vector<double> got(V), ref(V);
    for (int j = 0; j < V; ++j) {
      got[j] = with_entropy ? dlogits_entropy_value(static_cast<float>(z[j]), lf, static_cast<float>(w),
                                                    H, static_cast<float>(e), j == t)
                            : dlogits_value(static_cast<float>(z[j]), lf, static_cast<float>(w), j == t);
      std::vector<double> zp = z, zm = z;
      zp[j] += 1e-6;
      zm[j] -= 1e-6;
      ref[j] = (objective(zp, with_entropy) - objective(zm, with_entropy)) / 2e-6;
    }
    EXPECT_LT(test::rel_err_f64(got, ref), 1e-5) << "entropy " << with_entropy;
  }
}

// The row-major -> column-major mapping of gemm.cu, checked by evaluating cuBLASLt's
// column-major semantics (D = op1(X) op2(Y), X and Y as the layouts describe the memory) on
// row-major data for every transpose pair, against the row-major product.
TEST(CudaMath, GemmRowMajorMapsToCublasLtColumnMajor) {
  Rng rng(10);
  const int64_t M = 5, N = 3, K = 4;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
      const std::vector<double> A = randn(rng, static_cast<int>(M * K));
      const std::vector<double> B = randn(rng, static_cast<int>(K * N));
      std::vector<double> ref(M * N, 0.0);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          for (int64_t k = 0; k < K; ++k)
            ref[i * N + j] += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      const LtProblem p = lt_problem(ta, tb, M, N, K, lda, ldb, ldc);
      // column-major element (r, c) of a layout over memory `mem`: mem[c * ld + r]
      auto at = [](const std::vector<double>& mem, const LtLayout& l, int64_t r, int64_t c) {
        EXPECT_LT(r, l.rows);
        EXPECT_LT(c, l.cols);
        return mem[c * l.ld + r];
      };
      std::vector<double> C(M * N, 0.0);
      for (int64_t r = 0; r < p.m; ++r)
        for (int64_t c = 0; c < p.n; ++c) {
          double s = 0;
          for (int64_t k = 0; k < p.k; ++k) {
            const double x = p.trans1 ? at(B, p.first, k, r) : at(B, p.first, r, k);
            const double y = p.trans2 ? at(A, p.second, c, k) : at(A, p.second, k, c);
            s += x * y;
          }
          C[c * p.c.ld + r] = s;  // column-major (m, n) with ld: row-major (M, N) of C
        }
      EXPECT_LT(test::rel_err_f64(C, ref), 1e-12) << "trans_a " << ta << " trans_b " << tb;
    }
}

// The dtype plans are tested in cuda_gemm_plan_test.cpp.
TEST(CudaMath, GemmOperandAlignment) {
  alignas(256) static char buf[512];
  EXPECT_EQ(alignment_of(buf), 256u);
  EXPECT_EQ(alignment_of(buf + 2), 2u);
  EXPECT_EQ(alignment_of(buf + 12), 4u);
  EXPECT_EQ(alignment_of(buf + 128), 128u);
}

}  // namespace
}  // namespace sbp::cuda
