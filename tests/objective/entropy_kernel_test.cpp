// The LM head's entropy kernels (backend softmax_entropy and dlogits_entropy_inplace), against
// a float64 reference and against finite differences of L = sum_i a_i logp_i + b_i H_i with
// respect to every logit; the meta backend records the same shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Rows {
  int64_t n, V;
  std::vector<float> logits;
  std::vector<int32_t> targets;
};

Rows make_rows(int64_t n, int64_t V, uint64_t seed) {
  Rng rng(seed);
  Rows r{n, V, {}, {}};
  for (int64_t i = 0; i < n * V; ++i) r.logits.push_back(3.0f * rng.normal());
  for (int64_t i = 0; i < n; ++i)
    r.targets.push_back(i == 1 ? -1 : static_cast<int32_t>(rng.below(static_cast<uint64_t>(V))));
  return r;
}

// float64: lse, logp of the target, entropy of each row.
void reference(const Rows& r, const std::vector<double>& z, std::vector<double>* lse,
               std::vector<double>* logp, std::vector<double>* H) {
  lse->assign(static_cast<size_t>(r.n), 0);
  logp->assign(static_cast<size_t>(r.n), 0);
  H->assign(static_cast<size_t>(r.n), 0);
  for (int64_t i = 0; i < r.n; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < r.V; ++j) mx = std::max(mx, z[static_cast<size_t>(i * r.V + j)]);
    double s = 0;
    for (int64_t j = 0; j < r.V; ++j) s += std::exp(z[static_cast<size_t>(i * r.V + j)] - mx);
    const double l = mx + std::log(s);
    (*lse)[static_cast<size_t>(i)] = l;
    double h = 0;
    for (int64_t j = 0; j < r.V; ++j) {
      const double lp = z[static_cast<size_t>(i * r.V + j)] - l;
      h -= std::exp(lp) * lp;
    }
    (*H)[static_cast<size_t>(i)] = h;
    const int32_t t = r.targets[static_cast<size_t>(i)];
    (*logp)[static_cast<size_t>(i)] = t >= 0 ? z[static_cast<size_t>(i * r.V + t)] - l : 0.0;
  }
}

TEST(EntropyKernels, EntropyMatchesFloat64) {
  CpuBackend be;
  const Rows r = make_rows(5, 301, 1);
  std::vector<float> logits = r.logits, lse(5), logp(5), H(5);
  std::vector<int32_t> tg = r.targets;
  const Tensor tl(logits.data(), DType::F32, {5, 301}), tt(tg.data(), DType::I32, {5});
  const Tensor tlse(lse.data(), DType::F32, {5}), tlogp(logp.data(), DType::F32, {5});
  const Tensor tH(H.data(), DType::F32, {5});
  be.logsoftmax_target(tlse, tlogp, tl, tt);
  be.softmax_entropy(tH, tl, tlse);
  std::vector<double> z(r.logits.begin(), r.logits.end()), l64, lp64, H64;
  reference(r, z, &l64, &lp64, &H64);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(H[static_cast<size_t>(i)], H64[static_cast<size_t>(i)], 1e-5 * H64[static_cast<size_t>(i)] + 1e-6);
  // A one-hot-like row has entropy ~0; a uniform row log V.
  std::vector<float> u(301, 0.5f), ul(1), ulp(1), uH(1);
  std::vector<int32_t> ut = {3};
  be.logsoftmax_target(Tensor(ul.data(), DType::F32, {1}), Tensor(ulp.data(), DType::F32, {1}),
                       Tensor(u.data(), DType::F32, {1, 301}), Tensor(ut.data(), DType::I32, {1}));
  be.softmax_entropy(Tensor(uH.data(), DType::F32, {1}), Tensor(u.data(), DType::F32, {1, 301}),
                     Tensor(ul.data(), DType::F32, {1}));
  EXPECT_NEAR(uH[0], std::log(301.0), 1e-5);
}

TEST(EntropyKernels, GradientMatchesFiniteDifferences) {
  CpuBackend be;
  const int64_t n = 4, V = 37;
  const Rows r = make_rows(n, V, 2);
  const std::vector<float> a = {0.7f, -0.4f, 1.3f, -2.0f};  // dL/dlogp (row 1 has no target)
  const std::vector<float> b = {0.5f, 1.5f, -0.8f, 0.25f};  // dL/dH
  std::vector<float> g = r.logits, lse(n), logp(n), H(n);
  std::vector<int32_t> tg = r.targets;
  std::vector<float> av = a, bv = b;
  const Tensor tl(g.data(), DType::F32, {n, V}), tt(tg.data(), DType::I32, {n});
  const Tensor tlse(lse.data(), DType::F32, {n}), tlogp(logp.data(), DType::F32, {n});
  const Tensor tH(H.data(), DType::F32, {n});
  be.logsoftmax_target(tlse, tlogp, tl, tt);
  be.softmax_entropy(tH, tl, tlse);
  be.dlogits_entropy_inplace(tl, tlse, tt, Tensor(av.data(), DType::F32, {n}), tH,
                             Tensor(bv.data(), DType::F32, {n}));
  // L(z) in float64.
  auto loss = [&](const std::vector<double>& z) {
    std::vector<double> l64, lp64, H64;
    reference(r, z, &l64, &lp64, &H64);
    double L = 0;
    for (int64_t i = 0; i < n; ++i)
      L += (r.targets[static_cast<size_t>(i)] >= 0 ? a[static_cast<size_t>(i)] * lp64[static_cast<size_t>(i)] : 0.0) +
           b[static_cast<size_t>(i)] * H64[static_cast<size_t>(i)];
    return L;
  };
  std::vector<double> z(r.logits.begin(), r.logits.end());
  double gmax = 0;
  for (float v : g) gmax = std::max(gmax, std::fabs(static_cast<double>(v)));
  for (size_t k = 0; k < z.size(); ++k) {
    const double h = 1e-5, saved = z[k];
    z[k] = saved + h;
    const double up = loss(z);
    z[k] = saved - h;
    const double down = loss(z);
    z[k] = saved;
    EXPECT_NEAR(g[k], (up - down) / (2 * h), 1e-5 * gmax + 1e-6) << "logit " << k;
  }
  // With dL/dH = 0 the kernel equals the plain dlogits kernel bit for bit.
  std::vector<float> g1 = r.logits, g2 = r.logits, zero(n, 0.0f);
  be.dlogits_entropy_inplace(Tensor(g1.data(), DType::F32, {n, V}), tlse, tt,
                             Tensor(av.data(), DType::F32, {n}), tH,
                             Tensor(zero.data(), DType::F32, {n}));
  be.dlogits_inplace(Tensor(g2.data(), DType::F32, {n, V}), tlse, tt, Tensor(av.data(), DType::F32, {n}));
  EXPECT_EQ(g1, g2);
}

}  // namespace
}  // namespace sbp
