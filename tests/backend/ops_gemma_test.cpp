// The ops Gemma 3 adds to every backend (backend_suite.h): RMSNorm with a weight offset
// (y = xh * (1 + g)), GeGLU (gelu_tanh(gate) * up) and logit soft-capping (c tanh(x / c)),
// against float64 references written here, every backward against central finite differences
// of its reference (L = sum(forward(x) * R)), the accumulating backwards (+=) onto non-zero
// gradients, and BF16 operands in every combination with F32.
#include <cmath>
#include <vector>

#include "backend/backend_suite.h"

namespace sbp {
namespace {

using test::BackendOps;
using test::dot;
using test::numeric_grad;
using test::plus;
using test::rel_err_vec;
using test::Vec;

// ---- RMSNorm with a weight offset ----

Vec ref_rmsnorm_offset(const Vec& x, const Vec& g, int64_t d, double eps, double off) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = (off + g[j]) * x[r * d + j] * inv;
  }
  return y;
}

TEST_P(BackendOps, RmsNormWeightOffsetForwardBackward) {
  const int64_t n = 5, d = 24;
  const double eps = 1e-6, off = 1.0;
  Vec xd, gd, Rd;
  // Gemma's weights are centred on 0: small g, so (1 + g) differs from g everywhere.
  Buffer x = rand({n, d}, 1.0f, &xd), g = rand({d}, 0.3f, &gd), R = rand({n, d}, 1.0f, &Rd);
  Buffer y = zeros({n, d});
  be.rmsnorm_forward(y.view(), x.view(), g.view(), static_cast<float>(eps), 1.0f);
  Vec dx0, dg0;
  Buffer dx = rand({n, d}, 1.0f, &dx0), dg = rand({d}, 1.0f, &dg0);  // nonzero: must accumulate
  be.rmsnorm_backward(dx.view(), dg.view(), R.view(), x.view(), g.view(), static_cast<float>(eps),
                      1.0f);
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(down(y), ref_rmsnorm_offset(xd, gd, d, eps, off)), 1e-6);
  const Vec ndx = numeric_grad(
      [&](const Vec& v) { return dot(ref_rmsnorm_offset(v, gd, d, eps, off), Rd); }, xd);
  const Vec ndg = numeric_grad(
      [&](const Vec& v) { return dot(ref_rmsnorm_offset(xd, v, d, eps, off), Rd); }, gd);
  EXPECT_LT(rel_err_vec(down(dx), plus(dx0, ndx)), 1e-5);
  EXPECT_LT(rel_err_vec(down(dg), plus(dg0, ndg)), 1e-5);
  // Offset 0 is the plain RMSNorm, bit for bit (the default argument).
  Buffer y0 = zeros({n, d}), y1 = zeros({n, d});
  be.rmsnorm_forward(y0.view(), x.view(), g.view(), static_cast<float>(eps));
  be.rmsnorm_forward(y1.view(), x.view(), g.view(), static_cast<float>(eps), 0.0f);
  EXPECT_EQ(down(y0), down(y1));
}

TEST_P(BackendOps, RmsNormWeightOffsetBf16) {
  const int64_t n = 5, d = 24;
  const double eps = 1e-6, off = 1.0;
  const Vec xd = randb(n * d), gd = randb(d, 0.3f), Rd = randb(n * d);
  const Vec dx0 = randb(n * d), dg0 = randb(d);
  const Vec ref_y = ref_rmsnorm_offset(xd, gd, d, eps, off);
  const Vec ref_dx = plus(dx0, numeric_grad([&](const Vec& v) {
                            return dot(ref_rmsnorm_offset(v, gd, d, eps, off), Rd);
                          }, xd));
  for (int combo = 0; combo < 8; ++combo) {
    SCOPED_TRACE("y x g: " + test::combo_name(combo, 3));
    Buffer y = zeros({n, d}, test::dtype_combo(combo, 0));
    Buffer x = up(xd, {n, d}, test::dtype_combo(combo, 1)),
           g = up(gd, {d}, test::dtype_combo(combo, 2));
    be.rmsnorm_forward(y.view(), x.view(), g.view(), static_cast<float>(eps), 1.0f);
    if (computes()) test::expect_close(down(y), ref_y, test::dtype_combo(combo, 0), 1e-6, "y");
    Buffer dx = up(dx0, {n, d}, test::dtype_combo(combo, 0));
    Buffer dg = up(dg0, {d}, DType::F32);
    Buffer R = up(Rd, {n, d}, DType::F32);
    be.rmsnorm_backward(dx.view(), dg.view(), R.view(), x.view(), g.view(),
                        static_cast<float>(eps), 1.0f);
    if (computes()) test::expect_close(down(dx), ref_dx, test::dtype_combo(combo, 0), 1e-5, "dx");
  }
}

// ---- GeGLU ----

double gelu_tanh(double z) {
  return 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
}

Vec ref_geglu(const Vec& g, const Vec& u) {
  Vec o(g.size());
  for (size_t i = 0; i < g.size(); ++i) o[i] = gelu_tanh(g[i]) * u[i];
  return o;
}

TEST_P(BackendOps, GegluForwardBackward) {
  const int64_t n = 7, F = 13;
  Vec gd, ud, Rd;
  // gate spread over [-3, 3]: both tails and the curved middle of gelu.
  Buffer gate = rand({n, F}, 3.0f, &gd), upb = rand({n, F}, 1.0f, &ud);
  Buffer out = zeros({n, F});
  Buffer R = rand({n, F}, 1.0f, &Rd);
  be.geglu_forward(out.view(), gate.view(), upb.view());
  Buffer dg = zeros({n, F}), du = zeros({n, F});
  be.geglu_backward(dg.view(), du.view(), R.view(), gate.view(), upb.view());
  const Vec dg1 = computes() ? down(dg) : Vec(), du1 = computes() ? down(du) : Vec();
  // Again onto the non-zero gradients: the same terms are added once more.
  be.geglu_backward(dg.view(), du.view(), R.view(), gate.view(), upb.view());
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(down(out), ref_geglu(gd, ud)), 1e-6);
  EXPECT_LT(rel_err_vec(dg1, numeric_grad([&](const Vec& v) { return dot(ref_geglu(v, ud), Rd); },
                                          gd)),
            1e-5);
  EXPECT_LT(rel_err_vec(du1, numeric_grad([&](const Vec& v) { return dot(ref_geglu(gd, v), Rd); },
                                          ud)),
            1e-5);
  EXPECT_EQ(down(dg), plus(dg1, dg1));
  EXPECT_EQ(down(du), plus(du1, du1));
}

TEST_P(BackendOps, GegluBf16EveryDtypeCombination) {
  const int64_t n = 7, F = 13;
  const Vec gd = randb(n * F, 3.0f), ud = randb(n * F), Rd = randb(n * F);
  const Vec dg0 = randb(n * F), du0 = randb(n * F);
  const Vec ref_dg =
      plus(dg0, numeric_grad([&](const Vec& v) { return dot(ref_geglu(v, ud), Rd); }, gd));
  const Vec ref_du =
      plus(du0, numeric_grad([&](const Vec& v) { return dot(ref_geglu(gd, v), Rd); }, ud));
  for (int combo = 0; combo < 8; ++combo) {
    SCOPED_TRACE("out gate up: " + test::combo_name(combo, 3));
    Buffer out = zeros({n, F}, test::dtype_combo(combo, 0));
    Buffer gate = up(gd, {n, F}, test::dtype_combo(combo, 1));
    Buffer upb = up(ud, {n, F}, test::dtype_combo(combo, 2));
    be.geglu_forward(out.view(), gate.view(), upb.view());
    if (computes())
      test::expect_close(down(out), ref_geglu(gd, ud), test::dtype_combo(combo, 0), 1e-6);
  }
  for (int combo = 0; combo < 32; ++combo) {
    SCOPED_TRACE("dgate dup dout gate up: " + test::combo_name(combo, 5));
    Buffer dg = up(dg0, {n, F}, test::dtype_combo(combo, 0));
    Buffer du = up(du0, {n, F}, test::dtype_combo(combo, 1));
    Buffer R = up(Rd, {n, F}, test::dtype_combo(combo, 2));
    Buffer gate = up(gd, {n, F}, test::dtype_combo(combo, 3));
    Buffer upb = up(ud, {n, F}, test::dtype_combo(combo, 4));
    be.geglu_backward(dg.view(), du.view(), R.view(), gate.view(), upb.view());
    if (!computes()) continue;
    test::expect_close(down(dg), ref_dg, test::dtype_combo(combo, 0), 1e-5, "dgate");
    test::expect_close(down(du), ref_du, test::dtype_combo(combo, 1), 1e-5, "dup");
  }
}

// ---- logit soft-capping ----

Vec ref_softcap(const Vec& x, double c) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = c * std::tanh(x[i] / c);
  return y;
}

TEST_P(BackendOps, SoftcapForwardBackward) {
  const int64_t n = 6, V = 11;
  const double cap = 2.5;
  Vec xd, Rd;
  // |x| up to 8 > cap: the saturated part of tanh too.
  Buffer x = rand({n, V}, 8.0f, &xd), R = rand({n, V}, 1.0f, &Rd);
  be.softcap_forward(x.view(), static_cast<float>(cap));
  // dx starts as dL/dy = R and becomes dL/dx in place.
  Buffer dx = up(Rd, {n, V}, DType::F32);
  be.softcap_backward(dx.view(), x.view(), static_cast<float>(cap));
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(down(x), ref_softcap(xd, cap)), 1e-6);
  const Vec ndx = numeric_grad([&](const Vec& v) { return dot(ref_softcap(v, cap), Rd); }, xd);
  EXPECT_LT(rel_err_vec(down(dx), ndx), 1e-5);
}

TEST_P(BackendOps, SoftcapBf16) {
  const int64_t n = 6, V = 11;
  const double cap = 2.5;
  const Vec xd = randb(n * V, 8.0f), Rd = randb(n * V);
  for (int combo = 0; combo < 4; ++combo) {
    SCOPED_TRACE("dx y: " + test::combo_name(combo, 2));
    Buffer y = up(xd, {n, V}, test::dtype_combo(combo, 1));
    be.softcap_forward(y.view(), static_cast<float>(cap));
    if (!computes()) continue;
    const Vec yd = down(y);  // the capped values as stored (rounded in bf16)
    test::expect_close(yd, ref_softcap(xd, cap), test::dtype_combo(combo, 1), 1e-6, "y");
    Buffer dx = up(Rd, {n, V}, test::dtype_combo(combo, 0));
    be.softcap_backward(dx.view(), y.view(), static_cast<float>(cap));
    Vec want(Rd.size());  // the derivative taken from the stored capped values
    for (size_t i = 0; i < Rd.size(); ++i) {
      const double t = yd[i] / cap;
      want[i] = Rd[i] * (1.0 - t * t);  // Rd is bf16-exact (randb)
    }
    test::expect_close(down(dx), want, test::dtype_combo(combo, 0), 1e-6, "dx");
  }
}

TEST_P(BackendOps, GemmaOpsRejectMisuse) {
  Buffer a = zeros({3, 4}), b = zeros({3, 5});
  EXPECT_THROW(be.geglu_forward(a.view(), a.view(), b.view()), ShapeError);
  EXPECT_THROW(be.geglu_backward(a.view(), b.view(), a.view(), a.view(), a.view()), ShapeError);
  EXPECT_THROW(be.softcap_forward(a.view(), 0.0f), ShapeError);
  EXPECT_THROW(be.softcap_forward(a.view(), -1.0f), ShapeError);
  EXPECT_THROW(be.softcap_forward(a.view(), NAN), ShapeError);
  EXPECT_THROW(be.softcap_backward(a.view(), b.view(), 1.0f), ShapeError);
  Buffer g = zeros({4});
  EXPECT_THROW(be.rmsnorm_forward(a.view(), a.view(), g.view(), 1e-6f, INFINITY), ShapeError);
  EXPECT_THROW(be.rmsnorm_backward(a.view(), g.view(), a.view(), a.view(), g.view(), 1e-6f, NAN),
               ShapeError);
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(test::all_backends()),
                         test::BackendCaseName{});

}  // namespace
}  // namespace sbp
