// The CUDA attention at long key counts (the op suite reaches 200 keys; real steps 8K-128K):
// forward and backward, the tensor-core kernels and the fp32 ones, against float64 on a sample of
// query rows with all their keys, each element within a bound derived from the float64
// reference's own magnitudes (below), not a tuned number.
//
// STREAMBP_ATTENTION_LONG_KEYS: the key counts, comma-separated (default 8192 with a GPU, 512 on
// the emulated runtime, where scripts/test-emu.sh runs it). One causal segment of K rows, every
// row a query; head_dim 128, 4 query heads on 2 kv heads; F32 q, k, v holding bf16-exact values.
// dout is zero except on the sampled rows, so the float64 reference of dK and dV is exact for
// EVERY key from the sampled rows alone, and dQ of a sampled row depends on its own dout only.
//
// Bounds, per element, with eps = 2^-23 (one ulp of fp32 relative: a rounding to nearest or
// toward zero, tensor cores included) and the reference's magnitudes; i a sampled row with
// K_i = i + 1 keys, j a key, e a head-dim element, h the head dim, n the rows:
//   score error   ds_ij = scale (3h + 6) eps sum_e |q_ie k_je|   (split TF32: 3 products a term,
//                 each operand within 2^-22 of itself; fp32 dot products need less)
//   exponent      E_i   = 2 max_j ds_ij + (K_i + 6) eps + 2 eps (max_j |s_ij| + |lse_i|)
//                 (the score, the online softmax's sum of K_i terms and its log, the fp32
//                 argument of exp)
//   P relative    dP_i  = E_i + 2 eps (expf: 2 ulp)
//   out           (dP_i + (K_i + 22) eps) sum_j P_ij |v_je|   (K_i / 8 instructions of split
//                 products, each a tree; the fp32 kernels' K_i fused multiply-adds; rescaling)
//   lse           E_i
//   dS            P_ij (dP_i |dP_ij - D_i| + ddP_ij + dD_i), ddP_ij = (3h + 6) eps sum_e
//                 |dout_ie v_je|, dD_i = (h + 2) eps sum_e |dout_ie out_ie| + sum_e |dout_ie|
//                 (out's bound)
//   dq            scale sum_j (dS_ij's bound + (K_i + 22) eps |dS_ij|) |k_je|
//   dk, dv        the same sums over the sampled rows i >= j, with (n + 22) eps (the dK/dV
//                 kernels walk every query row)
// First order in eps (the second-order terms are below 2^-40 here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/backend_suite.h"
#include "core/memory.h"
#include "core/rng.h"

namespace sbp {
namespace {

constexpr int64_t kH = 4, kG = 2, kHead = 128;
constexpr double kEps = 1.0 / 8388608.0;  // 2^-23
constexpr int kSampledRows = 24;

std::vector<int64_t> key_counts() {
#if defined(STREAMBP_CUDA_EMULATION)
  std::string list = "512";
#else
  std::string list = "8192";
#endif
  if (const char* v = std::getenv("STREAMBP_ATTENTION_LONG_KEYS"); v && *v) list = v;
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(std::stoll(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

// The sampled rows: the last (most keys), the first, and others spread over the rest.
std::vector<int64_t> sampled_rows(int64_t n, Rng& rng) {
  std::vector<int64_t> rows = {n - 1, 0};
  for (int k = 1; k < kSampledRows / 2; ++k) rows.push_back(n - 1 - k * (n / kSampledRows));
  while (static_cast<int>(rows.size()) < kSampledRows) rows.push_back(static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

std::vector<float> bf16_exact(int64_t n, Rng& rng, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(scale * rng.normal()));
  return v;
}

struct Worst {
  double ratio = 0;  // error / bound
  std::string where;
  void take(double got, double ref, double bound, const std::string& what) {
    const double err = std::fabs(got - ref);
    const double r = err == 0 ? 0 : (bound > 0 ? err / bound : INFINITY);
    if (!(r <= ratio)) {
      ratio = std::isnan(r) ? INFINITY : r;
      where = what + ": " + std::to_string(got) + " vs " + std::to_string(ref) + ", bound " +
              std::to_string(bound);
    }
  }
};

void check(const char* kernels, int64_t n) {
  SCOPED_TRACE(std::string(kernels) + " kernels, " + std::to_string(n) + " keys");
  ASSERT_EQ(setenv("STREAMBP_CUDA_ATTENTION", kernels, 1), 0);
  const std::unique_ptr<Backend> be = make_backend(BackendSpec{BackendKind::cuda, 0});
  unsetenv("STREAMBP_CUDA_ATTENTION");
  Ledger ledger;
  Pool pool(ledger, *be);
  const int64_t Hh = kH * kHead, Gh = kG * kHead, group = kH / kG;
  const double scale = 1.0 / std::sqrt(static_cast<double>(kHead));
  Rng rng(static_cast<uint64_t>(n) * 31 + 7);
  const std::vector<float> q = bf16_exact(n * Hh, rng, 1.0f), k = bf16_exact(n * Gh, rng, 1.0f),
                           v = bf16_exact(n * Gh, rng, 1.0f);
  const std::vector<int64_t> rows = sampled_rows(n, rng);
  std::vector<float> dout(static_cast<size_t>(n * Hh), 0.0f);
  for (int64_t i : rows)
    for (int64_t c = 0; c < Hh; ++c) dout[i * Hh + c] = bf16_to_f32(f32_to_bf16(rng.normal()));
  auto tensor = [&](int64_t r, int64_t c, const std::vector<float>* values) {
    Buffer b = pool.allocate(Category::other, DType::F32, {r, c});
    if (values)
      upload_f32(b.view(), *values);
    else
      be->fill(b.view(), 0.0f);
    return b;
  };
  Buffer tq = tensor(n, Hh, &q), tk = tensor(n, Gh, &k), tv = tensor(n, Gh, &v);
  Buffer tdout = tensor(n, Hh, &dout), out = tensor(n, Hh, nullptr), lse = tensor(n, kH, nullptr);
  Buffer dq = tensor(n, Hh, nullptr), dk = tensor(n, Gh, nullptr), dv = tensor(n, Gh, nullptr);
  Buffer seg = pool.allocate(Category::other, DType::I32, {n});
  upload_i32(seg.view(), std::vector<int32_t>(static_cast<size_t>(n), 0));
  const AttentionDims dims{kH, kG, kHead, static_cast<float>(scale), 0};
  be->attention_forward(out.view(), lse.view(), tq.view(), tk.view(), tv.view(), seg.view(), 0,
                        dims);
  be->attention_backward(dq.view(), dk.view(), dv.view(), tdout.view(), tq.view(), tk.view(),
                         tv.view(), out.view(), lse.view(), seg.view(), 0, dims);
  const std::vector<float> g_out = download_f32(out.view()), g_lse = download_f32(lse.view());
  const std::vector<float> g_dq = download_f32(dq.view()), g_dk = download_f32(dk.view());
  const std::vector<float> g_dv = download_f32(dv.view());

  Worst w_out, w_lse, w_dq, w_dkv;
  // dK, dV references and bounds over every key, from the sampled rows.
  std::vector<double> ref_dk(static_cast<size_t>(n * Gh), 0.0), ref_dv(ref_dk.size(), 0.0);
  std::vector<double> bnd_dk(ref_dk.size(), 0.0), bnd_dv(ref_dk.size(), 0.0);
  std::vector<double> s, sabs, P, dP, dPabs;
  for (int64_t i : rows)
    for (int64_t hq = 0; hq < kH; ++hq) {
      const int64_t g = hq / group, K = i + 1;
      const float* qi = &q[i * Hh + hq * kHead];
      const float* di = &dout[i * Hh + hq * kHead];
      s.assign(static_cast<size_t>(K), 0.0);
      sabs.assign(s.size(), 0.0);
      dP.assign(s.size(), 0.0);
      dPabs.assign(s.size(), 0.0);
      double m = -INFINITY, smax = 0, ds_max = 0;
      for (int64_t j = 0; j < K; ++j) {
        const float* kj = &k[j * Gh + g * kHead];
        const float* vj = &v[j * Gh + g * kHead];
        double dot = 0, mag = 0, pv = 0, pvabs = 0;
        for (int64_t e = 0; e < kHead; ++e) {
          dot += double{qi[e]} * kj[e];
          mag += std::fabs(double{qi[e]} * kj[e]);
          pv += double{di[e]} * vj[e];
          pvabs += std::fabs(double{di[e]} * vj[e]);
        }
        s[j] = scale * dot;
        sabs[j] = scale * mag;
        dP[j] = pv;
        dPabs[j] = pvabs;
        m = std::max(m, s[j]);
        smax = std::max(smax, std::fabs(s[j]));
        ds_max = std::max(ds_max, (3 * kHead + 6) * kEps * sabs[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < K; ++j) l += std::exp(s[j] - m);
      const double L = m + std::log(l);
      P.assign(s.size(), 0.0);
      for (int64_t j = 0; j < K; ++j) P[j] = std::exp(s[j] - L);
      const double E = 2 * ds_max + (K + 6) * kEps + 2 * kEps * (smax + std::fabs(L));
      const double dPrel = E + 2 * kEps;
      const double acc = (K + 22) * kEps;
      const std::string at = "row " + std::to_string(i) + " head " + std::to_string(hq);
      w_lse.take(g_lse[i * kH + hq], L, E, at + " lse");
      double D = 0, Dabs = 0, out_bound_dot = 0;
      std::vector<double> o(kHead, 0.0), obound(kHead, 0.0);
      for (int64_t e = 0; e < kHead; ++e) {
        double mag = 0;
        for (int64_t j = 0; j < K; ++j) {
          o[e] += P[j] * v[j * Gh + g * kHead + e];
          mag += P[j] * std::fabs(double{v[j * Gh + g * kHead + e]});
        }
        obound[e] = (dPrel + acc) * mag;
        w_out.take(g_out[i * Hh + hq * kHead + e], o[e], obound[e], at + " out[" + std::to_string(e) + "]");
        D += di[e] * o[e];
        Dabs += std::fabs(di[e] * o[e]);
        out_bound_dot += std::fabs(double{di[e]}) * obound[e];
      }
      const double dD = (kHead + 2) * kEps * Dabs + out_bound_dot;
      // dS and its bound per key; dq of this row; this row's share of dK, dV.
      std::vector<double> dq_ref(kHead, 0.0), dq_bnd(kHead, 0.0);
      for (int64_t j = 0; j < K; ++j) {
        const double dS = P[j] * (dP[j] - D);
        const double dS_b = P[j] * (dPrel * std::fabs(dP[j] - D) + (3 * kHead + 6) * kEps * dPabs[j] + dD);
        const double kv_acc = (n + 22) * kEps;
        for (int64_t e = 0; e < kHead; ++e) {
          const double kje = k[j * Gh + g * kHead + e];
          dq_ref[e] += scale * dS * kje;
          dq_bnd[e] += scale * (dS_b + acc * std::fabs(dS)) * std::fabs(kje);
          const size_t kv = static_cast<size_t>(j * Gh + g * kHead + e);
          ref_dk[kv] += scale * dS * qi[e];
          bnd_dk[kv] += scale * (dS_b + kv_acc * std::fabs(dS)) * std::fabs(double{qi[e]});
          ref_dv[kv] += P[j] * di[e];
          bnd_dv[kv] += (P[j] * dPrel + kv_acc * P[j]) * std::fabs(double{di[e]});
        }
      }
      for (int64_t e = 0; e < kHead; ++e)
        w_dq.take(g_dq[i * Hh + hq * kHead + e], dq_ref[e], dq_bnd[e], at + " dq[" + std::to_string(e) + "]");
    }
  for (size_t x = 0; x < ref_dk.size(); ++x) {
    const std::string at = "key " + std::to_string(x / Gh) + " element " + std::to_string(x % Gh);
    w_dkv.take(g_dk[x], ref_dk[x], bnd_dk[x], at + " dk");
    w_dkv.take(g_dv[x], ref_dv[x], bnd_dv[x], at + " dv");
  }
  EXPECT_LE(w_out.ratio, 1.0) << w_out.where;
  EXPECT_LE(w_lse.ratio, 1.0) << w_lse.where;
  EXPECT_LE(w_dq.ratio, 1.0) << w_dq.where;
  EXPECT_LE(w_dkv.ratio, 1.0) << w_dkv.where;
  // The worst error against its bound, for the report of a GPU run.
  std::printf("CudaAttentionLong %s %lld keys: worst error / bound: out %.3g, lse %.3g, dq %.3g, "
              "dk/dv %.3g\n",
              kernels, static_cast<long long>(n), w_out.ratio, w_lse.ratio, w_dq.ratio,
              w_dkv.ratio);
}

struct CudaAttentionLong : ::testing::Test {
  void SetUp() override {
    if (const std::string why = test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(CudaAttentionLong, TensorCoreKernelsWithinTheirBoundsOfFloat64) {
  for (int64_t n : key_counts()) check("tc", n);
}

TEST_F(CudaAttentionLong, Fp32KernelsWithinTheirBoundsOfFloat64) {
  for (int64_t n : key_counts()) check("simt", n);
}

}  // namespace
}  // namespace sbp
