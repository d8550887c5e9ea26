// Every CPU kernel against an independent float64 reference written here, and every backward
// kernel against central finite differences of that reference (L = sum(forward(x) * R)).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using test::rel_err;
using Vec = std::vector<double>;

struct Fixture : ::testing::Test {
  Ledger ledger;
  Pool pool{ledger};
  CpuBackend be;
  Rng rng{1234};

  Buffer rand(Shape s, float scale = 1.0f) {
    Buffer b = pool.allocate(Category::other, DType::F32, s);
    test::fill_normal(b.view(), rng, scale);
    return b;
  }
  Buffer zeros(Shape s) { return pool.zeros(Category::other, DType::F32, s); }
  Buffer ids(std::vector<int32_t> v) {
    Buffer b = pool.allocate(Category::other, DType::I32, {static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), b.i32());
    return b;
  }
  static Vec to_vec(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }
};

// Central differences of f at x (double precision), returning the gradient.
Vec numeric_grad(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

double rel_err_vec(const float* a, const Vec& b) {
  std::vector<float> bf(b.begin(), b.end());
  return rel_err(a, bf.data(), static_cast<int64_t>(b.size()));
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- references (float64) ----
Vec ref_rmsnorm(const Vec& x, const Vec& g, int64_t d, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = g[j] * x[r * d + j] * inv;
  }
  return y;
}

TEST_F(Fixture, RmsNormForwardBackward) {
  const int64_t n = 5, d = 24;
  const double eps = 1e-6;
  Buffer x = rand({n, d}), g = rand({d}, 0.5f), R = rand({n, d}), y = zeros({n, d});
  be.rmsnorm_forward(y.view(), x.view(), g.view(), static_cast<float>(eps));
  const Vec xd = to_vec(x.view()), gd = to_vec(g.view()), Rd = to_vec(R.view());
  EXPECT_LT(rel_err_vec(y.f32(), ref_rmsnorm(xd, gd, d, eps)), 1e-6);

  Buffer dx = rand({n, d}), dg = rand({d});  // nonzero: backward must accumulate
  const Vec dx0 = to_vec(dx.view()), dg0 = to_vec(dg.view());
  be.rmsnorm_backward(dx.view(), dg.view(), R.view(), x.view(), g.view(), static_cast<float>(eps));
  Vec ndx = numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(v, gd, d, eps), Rd); }, xd);
  Vec ndg = numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(xd, v, d, eps), Rd); }, gd);
  for (size_t i = 0; i < ndx.size(); ++i) ndx[i] += dx0[i];
  for (size_t i = 0; i < ndg.size(); ++i) ndg[i] += dg0[i];
  EXPECT_LT(rel_err_vec(dx.f32(), ndx), 1e-5);
  EXPECT_LT(rel_err_vec(dg.f32(), ndg), 1e-5);
}

Vec ref_rope(const Vec& x, const std::vector<int32_t>& pos, const std::vector<float>& inv,
             int64_t heads, int64_t h) {
  Vec y(x.size());
  const int64_t half = h / 2;
  for (size_t i = 0; i < pos.size(); ++i)
    for (int64_t hd = 0; hd < heads; ++hd)
      for (int64_t j = 0; j < half; ++j) {
        const double ang = static_cast<double>(static_cast<float>(pos[i]) * inv[j]);
        const double c = std::cos(ang), s = std::sin(ang);
        const size_t o = i * heads * h + hd * h;
        y[o + j] = x[o + j] * c - x[o + j + half] * s;
        y[o + j + half] = x[o + j + half] * c + x[o + j] * s;
      }
  return y;
}

TEST_F(Fixture, RopeForwardBackward) {
  const int64_t heads = 3, h = 8, P = 40;
  std::vector<int32_t> pos = {0, 1, 7, 39, 3};
  std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.001f};
  Buffer table = zeros({P, h});
  be.rope_table(table.view(), inv);
  Buffer p = ids(pos);
  Buffer x = rand({5, heads * h});
  const Vec xd = to_vec(x.view());
  be.rope_forward(x.view(), p.view(), table.view());
  EXPECT_LT(rel_err_vec(x.f32(), ref_rope(xd, pos, inv, heads, h)), 1e-6);
  // Backward is the transpose of the rotation: <R, rope(x)> = <rope_bwd(R), x>.
  Buffer R = rand({5, heads * h});
  const Vec Rd = to_vec(R.view());
  be.rope_backward(R.view(), p.view(), table.view());
  Vec nd = numeric_grad([&](const Vec& v) { return dot(ref_rope(v, pos, inv, heads, h), Rd); }, xd);
  EXPECT_LT(rel_err_vec(R.f32(), nd), 1e-6);
  Buffer bad = ids({0, 1, 2, 3, P});
  EXPECT_THROW(be.rope_forward(x.view(), bad.view(), table.view()), ShapeError);
}

TEST_F(Fixture, SwigluForwardBackward) {
  const int64_t n = 7, F = 13;
  Buffer gate = rand({n, F}, 3.0f), up = rand({n, F}), out = zeros({n, F}), R = rand({n, F});
  auto ref = [&](const Vec& g, const Vec& u) {
    Vec o(g.size());
    for (size_t i = 0; i < g.size(); ++i) o[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return o;
  };
  const Vec gd = to_vec(gate.view()), ud = to_vec(up.view()), Rd = to_vec(R.view());
  be.swiglu_forward(out.view(), gate.view(), up.view());
  EXPECT_LT(rel_err_vec(out.f32(), ref(gd, ud)), 1e-6);
  Buffer dg = zeros({n, F}), du = zeros({n, F});
  be.swiglu_backward(dg.view(), du.view(), R.view(), gate.view(), up.view());
  EXPECT_LT(rel_err_vec(dg.f32(), numeric_grad([&](const Vec& v) { return dot(ref(v, ud), Rd); }, gd)), 1e-5);
  EXPECT_LT(rel_err_vec(du.f32(), numeric_grad([&](const Vec& v) { return dot(ref(gd, v), Rd); }, ud)), 1e-5);
}

TEST_F(Fixture, EmbeddingForwardBackwardWithRepeatedIds) {
  const int64_t V = 6, d = 5;
  Buffer table = rand({V, d}), id = ids({3, 0, 3, 5, 3}), x = zeros({5, d});
  be.embedding_forward(x.view(), id.view(), table.view());
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < d; ++j) EXPECT_EQ(x.f32()[i * d + j], table.f32()[id.i32()[i] * d + j]);
  Buffer dx = rand({5, d}), dt = rand({V, d});
  Vec expect = to_vec(dt.view());
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < d; ++j) expect[id.i32()[i] * d + j] += dx.f32()[i * d + j];
  be.embedding_backward(dt.view(), dx.view(), id.view());
  EXPECT_LT(rel_err_vec(dt.f32(), expect), 1e-7);
  Buffer bad = ids({0, 1, 2, 3, static_cast<int32_t>(V)});
  EXPECT_THROW(be.embedding_forward(x.view(), bad.view(), table.view()), ShapeError);
}

TEST_F(Fixture, LogSoftmaxTargetAndLogitsGradient) {
  const int64_t n = 4, V = 37;
  Buffer logits = rand({n, V}, 4.0f), tg = ids({5, -1, 36, 0}), w = rand({n});
  Buffer lse = zeros({n}), logp = zeros({n});
  const Vec ld = to_vec(logits.view()), wd = to_vec(w.view());
  auto ref_logp = [&](const Vec& l) {
    Vec lp(n, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      double mx = -1e300, s = 0;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, l[i * V + j]);
      for (int64_t j = 0; j < V; ++j) s += std::exp(l[i * V + j] - mx);
      const int32_t t = tg.i32()[i];
      lp[i] = t >= 0 ? l[i * V + t] - mx - std::log(s) : 0.0;
    }
    return lp;
  };
  be.logsoftmax_target(lse.view(), logp.view(), logits.view(), tg.view());
  EXPECT_LT(rel_err_vec(logp.f32(), ref_logp(ld)), 1e-6);
  EXPECT_EQ(logp.f32()[1], 0.0f);
  // dL/dlogits for L = sum_i w_i logp_i, written over the logits.
  be.dlogits_inplace(logits.view(), lse.view(), tg.view(), w.view());
  const Vec nd = numeric_grad([&](const Vec& l) { return dot(ref_logp(l), wd); }, ld);
  EXPECT_LT(rel_err_vec(logits.f32(), nd), 1e-5);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(logits.f32()[1 * V + j], 0.0f);  // no target
}

TEST_F(Fixture, LogSoftmaxIsStableForLargeLogits) {
  const int64_t V = 5;
  Buffer logits = zeros({1, V}), tg = ids({2}), lse = zeros({1}), logp = zeros({1});
  for (int64_t j = 0; j < V; ++j) logits.f32()[j] = 1000.0f + static_cast<float>(j);
  be.logsoftmax_target(lse.view(), logp.view(), logits.view(), tg.view());
  double s = 0;
  for (int j = 0; j < V; ++j) s += std::exp(j - 4.0);
  EXPECT_NEAR(logp.f32()[0], (2.0 - 4.0) - std::log(s), 1e-5);
}

TEST_F(Fixture, GemmAllTransposesAccumulate) {
  const int64_t M = 5, N = 4, K = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Buffer A = ta ? rand({K, M}) : rand({M, K});
      Buffer B = tb ? rand({N, K}) : rand({K, N});
      Buffer C = rand({M, N});
      Vec expect = to_vec(C.view());
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += static_cast<double>(ta ? A.f32()[k * M + i] : A.f32()[i * K + k]) *
                 (tb ? B.f32()[j * K + k] : B.f32()[k * N + j]);
          expect[i * N + j] = 0.5 * expect[i * N + j] + 2.0 * s;
        }
      be.reset_flops();
      be.gemm(C.view(), A.view(), ta, B.view(), tb, 2.0f, 0.5f);
      EXPECT_LT(rel_err_vec(C.f32(), expect), 1e-6);
      EXPECT_EQ(be.flops(), 2 * M * N * K);
    }
  Buffer A = rand({M, K}), B = rand({M, N}), C = rand({M, N});
  EXPECT_THROW(be.gemm(C.view(), A.view(), false, B.view(), false, 1, 0), ShapeError);
}

TEST_F(Fixture, BiasAndReductions) {
  const int64_t n = 9, m = 4;
  Buffer y = rand({n, m}), b = rand({m}), db = rand({m});
  Vec expect_y = to_vec(y.view()), expect_db = to_vec(db.view());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      expect_db[j] += y.f32()[i * m + j];
      expect_y[i * m + j] += b.f32()[j];
    }
  be.bias_backward(db.view(), y.view());
  EXPECT_LT(rel_err_vec(db.f32(), expect_db), 1e-6);
  be.add_bias(y.view(), b.view());
  EXPECT_LT(rel_err_vec(y.f32(), expect_y), 1e-7);
  double ss = 0;
  for (float v : std::vector<float>(y.f32(), y.f32() + n * m)) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(be.sum_squares(y.view()), ss, 1e-9 * ss);
}

TEST_F(Fixture, CopyConvertsBf16RoundToNearestEven) {
  Buffer src = zeros({4});
  src.f32()[0] = 1.0f;
  src.f32()[1] = 1.0f + 1.0f / 256.0f;          // exactly halfway: rounds to even (1.0)
  src.f32()[2] = 1.0f + 3.0f / 256.0f;          // halfway, rounds up to even
  src.f32()[3] = -3.140625f;
  Buffer mid = pool.allocate(Category::other, DType::BF16, {4});
  Buffer back = zeros({4});
  be.copy(mid.view(), src.view());
  be.copy(back.view(), mid.view());
  EXPECT_EQ(back.f32()[0], 1.0f);
  EXPECT_EQ(back.f32()[1], 1.0f);
  EXPECT_EQ(back.f32()[2], 1.0f + 4.0f / 256.0f);
  EXPECT_EQ(back.f32()[3], -3.140625f);
}

TEST_F(Fixture, AdamWMatchesTorchFormula) {
  const int64_t n = 6;
  Buffer p = rand({n}), g = rand({n}), m = rand({n}, 0.1f), v = zeros({n});
  for (int64_t i = 0; i < n; ++i) v.f32()[i] = 0.01f * static_cast<float>(i + 1);
  const Vec p0 = to_vec(p.view()), g0 = to_vec(g.view()), m0 = to_vec(m.view()), v0 = to_vec(v.view());
  AdamWStep s{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3};
  be.adamw_step(p.view(), g.view(), m.view(), v.view(), s);
  for (int64_t i = 0; i < n; ++i) {
    double pp = p0[i] * (1 - 1e-2 * 0.1);
    const double mm = 0.9 * m0[i] + 0.1 * g0[i], vv = 0.95 * v0[i] + 0.05 * g0[i] * g0[i];
    const double mhat = mm / (1 - std::pow(0.9, 3)), vhat = vv / (1 - std::pow(0.95, 3));
    pp -= 1e-2 * mhat / (std::sqrt(vhat) + 1e-8);
    EXPECT_NEAR(p.f32()[i], pp, 1e-6 * std::max(1.0, std::fabs(pp)));
    EXPECT_NEAR(m.f32()[i], mm, 1e-6);
    EXPECT_NEAR(v.f32()[i], vv, 1e-7);
  }
}

}  // namespace
}  // namespace sbp
