// The decoder-layer ops of every backend (backend_suite.h): rmsnorm, rope_table, rope, swiglu,
// embedding and attention, against float64 references written here, every backward op against
// central finite differences of its reference (L = sum(forward(x) * R)), and the backward ops
// that accumulate (+=) from non-zero gradient buffers. (rope_backward is an in-place rotation,
// not an accumulation.) Each also with BF16 operands, in every combination of F32 and BF16
// (backend_suite.h).
#include <algorithm>
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

// ---- RMSNorm ----

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

TEST_P(BackendOps, RmsNormForwardBackward) {
  const int64_t n = 5, d = 24;
  const double eps = 1e-6;
  Vec xd, gd, Rd;
  Buffer x = rand({n, d}, 1.0f, &xd), g = rand({d}, 0.5f, &gd), R = rand({n, d}, 1.0f, &Rd);
  Buffer y = zeros({n, d});
  be.rmsnorm_forward(y.view(), x.view(), g.view(), static_cast<float>(eps));
  Vec dx0, dg0;
  Buffer dx = rand({n, d}, 1.0f, &dx0), dg = rand({d}, 1.0f, &dg0);  // nonzero: must accumulate
  be.rmsnorm_backward(dx.view(), dg.view(), R.view(), x.view(), g.view(), static_cast<float>(eps));
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(down(y), ref_rmsnorm(xd, gd, d, eps)), 1e-6);
  const Vec ndx =
      numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(v, gd, d, eps), Rd); }, xd);
  const Vec ndg =
      numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(xd, v, d, eps), Rd); }, gd);
  EXPECT_LT(rel_err_vec(down(dx), plus(dx0, ndx)), 1e-5);
  EXPECT_LT(rel_err_vec(down(dg), plus(dg0, ndg)), 1e-5);
}

// Every combination of F32 and BF16 for y, x, g (forward) and dx, dg, dy, x, g (backward, onto
// non-zero gradients), against the float64 reference on the bf16-rounded inputs.
TEST_P(BackendOps, RmsNormBf16EveryDtypeCombination) {
  const int64_t n = 5, d = 24;
  const double eps = 1e-6;
  const Vec xd = randb(n * d), gd = randb(d, 0.5f), Rd = randb(n * d);
  const Vec dx0 = randb(n * d), dg0 = randb(d);
  const Vec ref_y = ref_rmsnorm(xd, gd, d, eps);
  const Vec ref_dx = plus(
      dx0, numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(v, gd, d, eps), Rd); }, xd));
  const Vec ref_dg = plus(
      dg0, numeric_grad([&](const Vec& v) { return dot(ref_rmsnorm(xd, v, d, eps), Rd); }, gd));
  for (int combo = 0; combo < 8; ++combo) {
    SCOPED_TRACE("y x g: " + test::combo_name(combo, 3));
    Buffer y = zeros({n, d}, test::dtype_combo(combo, 0));
    Buffer x = up(xd, {n, d}, test::dtype_combo(combo, 1)),
           g = up(gd, {d}, test::dtype_combo(combo, 2));
    be.rmsnorm_forward(y.view(), x.view(), g.view(), static_cast<float>(eps));
    if (computes()) test::expect_close(down(y), ref_y, test::dtype_combo(combo, 0), 1e-6, "y");
  }
  for (int combo = 0; combo < 32; ++combo) {
    SCOPED_TRACE("dx dg dy x g: " + test::combo_name(combo, 5));
    Buffer dx = up(dx0, {n, d}, test::dtype_combo(combo, 0));
    Buffer dg = up(dg0, {d}, test::dtype_combo(combo, 1));
    Buffer R = up(Rd, {n, d}, test::dtype_combo(combo, 2));
    Buffer x = up(xd, {n, d}, test::dtype_combo(combo, 3));
    Buffer g = up(gd, {d}, test::dtype_combo(combo, 4));
    be.rmsnorm_backward(dx.view(), dg.view(), R.view(), x.view(), g.view(),
                        static_cast<float>(eps));
    if (!computes()) continue;
    test::expect_close(down(dx), ref_dx, test::dtype_combo(combo, 0), 1e-5, "dx");
    test::expect_close(down(dg), ref_dg, test::dtype_combo(combo, 1), 1e-5, "dg");
  }
}

// Per head, as q/k-norm uses it: x (n, heads * h) normalised over each head's h values.
TEST_P(BackendOps, RmsNormPerHeadRows) {
  const int64_t n = 3, heads = 4, h = 6;
  const double eps = 1e-5;
  Vec xd, gd;
  Buffer x = rand({n, heads * h}, 2.0f, &xd), g = rand({h}, 1.0f, &gd);
  Buffer y = zeros({n, heads * h});
  be.rmsnorm_forward(y.view(), x.view(), g.view(), static_cast<float>(eps));
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(down(y), ref_rmsnorm(xd, gd, h, eps)), 1e-6);
}

// ---- rotary embedding ----

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

TEST_P(BackendOps, RopeTableIsCosThenSin) {
  const int64_t P = 50, h = 6;
  const std::vector<float> inv = {1.0f, 0.1f, 1e-3f};
  Buffer table = zeros({P, h});
  be.rope_table(table.view(), inv);
  if (!computes()) return;
  Vec expect(static_cast<size_t>(P * h));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < h / 2; ++i) {
      // The angle is rounded to fp32 first, as transformers computes it.
      const double ang = static_cast<double>(static_cast<float>(p) * inv[i]);
      expect[p * h + i] = std::cos(ang);
      expect[p * h + h / 2 + i] = std::sin(ang);
    }
  EXPECT_LT(rel_err_vec(down(table), expect), 1e-7);
}

// yarn's attention factor scales cos and sin after their fp32 rounding (as transformers
// multiplies them), and a table built in row ranges (dynamic rope in generation) holds the
// positions first_position + row: bit for bit the rows of one table, times the factor.
TEST_P(BackendOps, RopeTableScaledAndFromAPosition) {
  const int64_t P = 50, h = 6, p0 = 17;
  const std::vector<float> inv = {1.0f, 0.1f, 1e-3f};
  const float s = 1.1386294f;
  Buffer whole = zeros({P, h}), scaled = zeros({P, h}), part = zeros({P - p0, h});
  be.rope_table(whole.view(), inv);
  be.rope_table(scaled.view(), inv, s);
  be.rope_table(part.view(), inv, s, p0);
  EXPECT_THROW(be.rope_table(part.view(), inv, 0.0f), ShapeError);
  EXPECT_THROW(be.rope_table(part.view(), inv, 1.0f, -1), ShapeError);
  if (!computes()) return;
  const Vec w = down(whole), sc = down(scaled), pt = down(part);
  for (int64_t i = 0; i < P * h; ++i)
    ASSERT_EQ(static_cast<float>(sc[i]), static_cast<float>(w[i]) * s) << i;
  for (int64_t i = 0; i < (P - p0) * h; ++i)
    ASSERT_EQ(pt[i], sc[p0 * h + i]) << i;
}

TEST_P(BackendOps, RopeForwardBackward) {
  const int64_t heads = 3, h = 8, P = 40;
  std::vector<int32_t> pos = {0, 1, 7, 39, 3};
  std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.001f};
  Buffer table = zeros({P, h});
  be.rope_table(table.view(), inv);
  Buffer p = ids(pos);
  Vec xd, Rd;
  Buffer x = rand({5, heads * h}, 1.0f, &xd);
  be.rope_forward(x.view(), p.view(), table.view());
  // Backward is the transpose of the rotation: <R, rope(x)> = <rope_bwd(R), x>.
  Buffer R = rand({5, heads * h}, 1.0f, &Rd);
  be.rope_backward(R.view(), p.view(), table.view());
  if (!computes()) return;  // position contents: only a backend with the data can check them
  EXPECT_LT(rel_err_vec(down(x), ref_rope(xd, pos, inv, heads, h)), 1e-6);
  const Vec nd =
      numeric_grad([&](const Vec& v) { return dot(ref_rope(v, pos, inv, heads, h), Rd); }, xd);
  EXPECT_LT(rel_err_vec(down(R), nd), 1e-6);
  Buffer bad = ids({0, 1, 2, 3, P});
  // Reported by the op or, on a GPU, at the next synchronisation (Backend::synchronize).
  EXPECT_THROW({ be.rope_forward(x.view(), bad.view(), table.view()); be.synchronize(); },
               ShapeError);
  Buffer negative = ids({0, 1, -1, 3, 4});
  EXPECT_THROW({ be.rope_backward(x.view(), negative.view(), table.view()); be.synchronize(); },
               ShapeError);
}

// A BF16 x is rotated in fp32 and rounded once, forward and backward.
TEST_P(BackendOps, RopeForwardBackwardBf16) {
  const int64_t heads = 3, h = 8, P = 40;
  std::vector<int32_t> pos = {0, 1, 7, 39, 3};
  std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.001f};
  Buffer table = zeros({P, h});
  be.rope_table(table.view(), inv);
  Buffer p = ids(pos);
  const Vec xd = randb(5 * heads * h), Rd = randb(5 * heads * h);
  Buffer x = up(xd, {5, heads * h}, DType::BF16), R = up(Rd, {5, heads * h}, DType::BF16);
  be.rope_forward(x.view(), p.view(), table.view());
  be.rope_backward(R.view(), p.view(), table.view());
  if (!computes()) return;
  test::expect_close(down(x), ref_rope(xd, pos, inv, heads, h), DType::BF16, 1e-6, "x");
  const Vec nd =
      numeric_grad([&](const Vec& v) { return dot(ref_rope(v, pos, inv, heads, h), Rd); }, xd);
  test::expect_close(down(R), nd, DType::BF16, 1e-6, "dx");
}

// ---- SwiGLU ----

TEST_P(BackendOps, SwigluForwardBackward) {
  const int64_t n = 7, F = 13;
  Vec gd, ud, Rd;
  Buffer gate = rand({n, F}, 3.0f, &gd), upb = rand({n, F}, 1.0f, &ud);
  Buffer out = zeros({n, F});
  Buffer R = rand({n, F}, 1.0f, &Rd);
  auto ref = [&](const Vec& g, const Vec& u) {
    Vec o(g.size());
    for (size_t i = 0; i < g.size(); ++i) o[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return o;
  };
  be.swiglu_forward(out.view(), gate.view(), upb.view());
  Buffer dg = zeros({n, F}), du = zeros({n, F});
  be.swiglu_backward(dg.view(), du.view(), R.view(), gate.view(), upb.view());
  const Vec dg1 = computes() ? down(dg) : Vec(), du1 = computes() ? down(du) : Vec();
  // Again onto the non-zero gradients: the same terms are added once more.
  be.swiglu_backward(dg.view(), du.view(), R.view(), gate.view(), upb.view());
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(down(out), ref(gd, ud)), 1e-6);
  EXPECT_LT(rel_err_vec(dg1, numeric_grad([&](const Vec& v) { return dot(ref(v, ud), Rd); }, gd)),
            1e-5);
  EXPECT_LT(rel_err_vec(du1, numeric_grad([&](const Vec& v) { return dot(ref(gd, v), Rd); }, ud)),
            1e-5);
  EXPECT_EQ(down(dg), plus(dg1, dg1));
  EXPECT_EQ(down(du), plus(du1, du1));
}

// Every combination of F32 and BF16 for out, gate, up (forward) and dgate, dup, dout, gate, up
// (backward, onto non-zero gradients).
TEST_P(BackendOps, SwigluBf16EveryDtypeCombination) {
  const int64_t n = 7, F = 13;
  const Vec gd = randb(n * F, 3.0f), ud = randb(n * F), Rd = randb(n * F);
  const Vec dg0 = randb(n * F), du0 = randb(n * F);
  auto ref = [&](const Vec& g, const Vec& u) {
    Vec o(g.size());
    for (size_t i = 0; i < g.size(); ++i) o[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    return o;
  };
  const Vec ref_dg = plus(dg0, numeric_grad([&](const Vec& v) { return dot(ref(v, ud), Rd); }, gd));
  const Vec ref_du = plus(du0, numeric_grad([&](const Vec& v) { return dot(ref(gd, v), Rd); }, ud));
  for (int combo = 0; combo < 8; ++combo) {
    SCOPED_TRACE("out gate up: " + test::combo_name(combo, 3));
    Buffer out = zeros({n, F}, test::dtype_combo(combo, 0));
    Buffer gate = up(gd, {n, F}, test::dtype_combo(combo, 1));
    Buffer upb = up(ud, {n, F}, test::dtype_combo(combo, 2));
    be.swiglu_forward(out.view(), gate.view(), upb.view());
    if (computes()) test::expect_close(down(out), ref(gd, ud), test::dtype_combo(combo, 0), 1e-6);
  }
  for (int combo = 0; combo < 32; ++combo) {
    SCOPED_TRACE("dgate dup dout gate up: " + test::combo_name(combo, 5));
    Buffer dg = up(dg0, {n, F}, test::dtype_combo(combo, 0));
    Buffer du = up(du0, {n, F}, test::dtype_combo(combo, 1));
    Buffer R = up(Rd, {n, F}, test::dtype_combo(combo, 2));
    Buffer gate = up(gd, {n, F}, test::dtype_combo(combo, 3));
    Buffer upb = up(ud, {n, F}, test::dtype_combo(combo, 4));
    be.swiglu_backward(dg.view(), du.view(), R.view(), gate.view(), upb.view());
    if (!computes()) continue;
    test::expect_close(down(dg), ref_dg, test::dtype_combo(combo, 0), 1e-5, "dgate");
    test::expect_close(down(du), ref_du, test::dtype_combo(combo, 1), 1e-5, "dup");
  }
}

// ---- embedding ----

TEST_P(BackendOps, EmbeddingForwardBackwardWithRepeatedIds) {
  const int64_t V = 6, d = 5;
  const std::vector<int32_t> idv = {3, 0, 3, 5, 3};
  Vec td;
  Buffer table = rand({V, d}, 1.0f, &td), id = ids(idv), x = zeros({5, d});
  be.embedding_forward(x.view(), id.view(), table.view());
  Vec dxd, dt0;
  Buffer dx = rand({5, d}, 1.0f, &dxd), dt = rand({V, d}, 1.0f, &dt0);
  be.embedding_backward(dt.view(), dx.view(), id.view());
  if (!computes()) return;          // id contents: only a backend with the data can check them
  auto ref = [&](const Vec& tab) {  // (5, d) rows idv of tab
    Vec out(static_cast<size_t>(5 * d));
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < d; ++j) out[i * d + j] = tab[idv[i] * d + j];
    return out;
  };
  const Vec xg = down(x), expect_x = ref(td);
  for (int64_t i = 0; i < 5 * d; ++i) EXPECT_EQ(xg[i], expect_x[i]);
  Vec expect = dt0;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < d; ++j) expect[idv[i] * d + j] += dxd[i * d + j];
  const Vec dtg = down(dt);
  EXPECT_LT(rel_err_vec(dtg, expect), 1e-7);
  EXPECT_LT(
      rel_err_vec(dtg, plus(dt0, numeric_grad([&](const Vec& t) { return dot(ref(t), dxd); }, td))),
      1e-6);
  Buffer bad = ids({0, 1, 2, 3, static_cast<int32_t>(V)});
  EXPECT_THROW({ be.embedding_forward(x.view(), bad.view(), table.view()); be.synchronize(); },
               ShapeError);
  Buffer negative = ids({0, -1, 2, 3, 4});
  EXPECT_THROW({ be.embedding_backward(dt.view(), dx.view(), negative.view()); be.synchronize(); },
               ShapeError);
}

// Every combination of F32 and BF16 for x, table (forward: exact, a copy of bf16 values) and
// dtable, dx (backward, repeated ids, onto a non-zero dtable). A BF16 dtable sums each element's
// terms in fp32 and rounds once: id 1 below gets 4 terms of 2^-9 onto 1, under half a bf16 ulp
// each (2^-8) but one ulp (2^-7) together.
TEST_P(BackendOps, EmbeddingBf16EveryDtypeCombination) {
  const int64_t V = 6, d = 5, n = 9;
  const std::vector<int32_t> idv = {3, 0, 3, 5, 3, 1, 1, 1, 1};
  Vec td = randb(V * d), dxd = randb(n * d), dt0 = randb(V * d);
  for (int64_t j = 0; j < d; ++j) {
    dt0[1 * d + j] = 1.0;
    for (int64_t i = 5; i < 9; ++i) dxd[i * d + j] = std::ldexp(1.0, -9);
  }
  Vec expect_x(static_cast<size_t>(n * d)), expect_dt = dt0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      expect_x[i * d + j] = td[idv[i] * d + j];
      expect_dt[idv[i] * d + j] += dxd[i * d + j];
    }
  Buffer id = ids(idv);
  for (int combo = 0; combo < 4; ++combo) {
    SCOPED_TRACE(test::combo_name(combo, 2));
    const DType d0 = test::dtype_combo(combo, 0), d1 = test::dtype_combo(combo, 1);
    Buffer x = zeros({n, d}, d0), table = up(td, {V, d}, d1);
    be.embedding_forward(x.view(), id.view(), table.view());
    Buffer dt = up(dt0, {V, d}, d0), dx = up(dxd, {n, d}, d1);
    be.embedding_backward(dt.view(), dx.view(), id.view());
    if (!computes()) continue;
    EXPECT_EQ(down(x), expect_x);
    const Vec dtg = down(dt);
    test::expect_close(dtg, expect_dt, d0, 1e-7, "dtable");
    for (int64_t j = 0; j < d; ++j) EXPECT_EQ(dtg[1 * d + j], 1.0 + std::ldexp(1.0, -7));
  }
}

// The padding row (torch's nn.Embedding padding_idx) gets nothing from its lookups, whatever
// the dtypes; every other row gets its sum as without one. Row 3 is looked up three times, row
// 2 never (a padding row absent from the ids changes nothing).
TEST_P(BackendOps, EmbeddingBackwardSkipsThePaddingRow) {
  const int64_t V = 6, d = 5, n = 7;
  const std::vector<int32_t> idv = {3, 0, 3, 5, 3, 1, 1};
  const Vec dxd = randb(n * d), dt0 = randb(V * d);
  Buffer id = ids(idv);
  for (const int64_t pad : {int64_t{3}, int64_t{2}, int64_t{-1}}) {
    Vec expect = dt0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j)
        if (idv[i] != pad) expect[idv[i] * d + j] += dxd[i * d + j];
    for (int combo = 0; combo < 4; ++combo) {
      SCOPED_TRACE(test::combo_name(combo, 2) + " padding row " + std::to_string(pad));
      const DType d0 = test::dtype_combo(combo, 0), d1 = test::dtype_combo(combo, 1);
      Buffer dt = up(dt0, {V, d}, d0), dx = up(dxd, {n, d}, d1);
      be.embedding_backward(dt.view(), dx.view(), id.view(), pad);
      if (!computes()) continue;
      const Vec dtg = down(dt);
      test::expect_close(dtg, expect, d0, 1e-7, "dtable");
      if (pad >= 0) {
        for (int64_t j = 0; j < d; ++j) EXPECT_EQ(dtg[pad * d + j], dt0[pad * d + j]);
      }
    }
  }
  Buffer dt = zeros({V, d}), dx = zeros({n, d});
  EXPECT_THROW(be.embedding_backward(dt.view(), dx.view(), id.view(), V), ShapeError);
  EXPECT_THROW(be.embedding_backward(dt.view(), dx.view(), id.view(), -2), ShapeError);
}

// ---- attention ----

// Queries [q_offset, q_offset + n) of a packed stream with segment starts `seg` attend to keys
// [0, tk), causally within their segment and, with a window w > 0, to their last w keys only; GQA.
struct AttentionCase {
  const char* name;
  int64_t H, G, h;
  std::vector<int64_t> segments;  // lengths; T = their sum
  int64_t q_offset, n, tk;
  int64_t window = 0;

  std::vector<int32_t> seg_start() const {
    std::vector<int32_t> s;
    int64_t start = 0;
    for (int64_t len : segments) {
      for (int64_t i = 0; i < len; ++i) s.push_back(static_cast<int32_t>(start));
      start += len;
    }
    return s;
  }
  AttentionDims dims() const { return {H, G, h, 1.0f / std::sqrt(static_cast<float>(h)), window}; }
  // First key of global row `row`: max(seg_start, row - window + 1) (backend.h).
  int64_t first_key(const std::vector<int32_t>& seg, int64_t row) const {
    return window > 0 ? std::max<int64_t>(seg[row], row - window + 1) : seg[row];
  }
};

// out (n, H*h) and lse (n, H), materialising the scores of each row.
void ref_attention(const AttentionCase& c, const std::vector<int32_t>& seg, const Vec& q,
                   const Vec& k, const Vec& v, Vec* out, Vec* lse) {
  const int64_t H = c.H, G = c.G, h = c.h, group = H / G;
  const double scale = c.dims().scale;
  out->assign(static_cast<size_t>(c.n * H * h), 0.0);
  lse->assign(static_cast<size_t>(c.n * H), 0.0);
  for (int64_t i = 0; i < c.n; ++i) {
    const int64_t row = c.q_offset + i;
    for (int64_t hq = 0; hq < H; ++hq) {
      const int64_t g = hq / group;
      const int64_t j0 = c.first_key(seg, row);
      Vec s;
      for (int64_t j = j0; j <= row; ++j) {
        double sc = 0;
        for (int64_t e = 0; e < h; ++e) sc += q[(i * H + hq) * h + e] * k[(j * G + g) * h + e];
        s.push_back(scale * sc);
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double x : s) sum += std::exp(x - mx);
      const double l = mx + std::log(sum);
      (*lse)[i * H + hq] = l;
      for (int64_t j = j0; j <= row; ++j) {
        const double p = std::exp(s[j - j0] - l);
        for (int64_t e = 0; e < h; ++e) (*out)[(i * H + hq) * h + e] += p * v[(j * G + g) * h + e];
      }
    }
  }
}

TEST_P(BackendOps, AttentionMatchesFloat64AndFiniteDifferences) {
  const std::vector<AttentionCase> cases = {
      // a chunk in the middle of three segments; keys past the queries get no gradient
      {"gqa_chunk", 4, 2, 8, {5, 7, 4}, 6, 8, 16},
      {"mha_whole", 2, 2, 4, {9}, 0, 9, 9},
      {"mqa_one_row", 3, 1, 6, {4, 6}, 7, 1, 8},
      // sliding windows: shorter than the chunk and a segment, a row and its predecessor,
      // longer than the chunk but cut by a segment start
      {"gqa_window3", 4, 2, 8, {5, 11, 4}, 6, 10, 20, 3},
      {"mha_window2", 2, 2, 4, {12}, 0, 12, 12, 2},
      {"mqa_window_past_chunk", 3, 1, 6, {3, 15}, 8, 6, 16, 9},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t Hh = c.H * c.h, Gh = c.G * c.h;
    const std::vector<int32_t> seg = c.seg_start();
    Vec qd, kd, vd, dod, dq0, dk0, dv0;
    Buffer q = rand({c.n, Hh}, 2.0f, &qd), k = rand({c.tk, Gh}, 1.0f, &kd);
    Buffer v = rand({c.tk, Gh}, 1.0f, &vd), dout = rand({c.n, Hh}, 1.0f, &dod);
    Buffer seg_start = ids(seg);
    Buffer out = zeros({c.n, Hh}), lse = zeros({c.n, c.H});
    be.reset_flops();
    be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg_start.view(),
                         c.q_offset, c.dims());
    be.synchronize();  // the CUDA backend counts attention's FLOPs on the device
    EXPECT_GT(be.flops(), 0);
    // Non-zero gradients: the backward must add to them.
    Buffer dq = rand({c.n, Hh}, 1.0f, &dq0), dk = rand({c.tk, Gh}, 1.0f, &dk0);
    Buffer dv = rand({c.tk, Gh}, 1.0f, &dv0);
    be.attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                          v.view(), out.view(), lse.view(), seg_start.view(), c.q_offset, c.dims());
    if (!computes()) continue;
    Vec ref_out, ref_lse;
    ref_attention(c, seg, qd, kd, vd, &ref_out, &ref_lse);
    EXPECT_LT(rel_err_vec(down(out), ref_out), 1e-5);
    EXPECT_LT(rel_err_vec(down(lse), ref_lse), 1e-5);
    // L = sum(out * dout)
    auto loss = [&](const Vec& qq, const Vec& kk, const Vec& vv) {
      Vec o, l;
      ref_attention(c, seg, qq, kk, vv, &o, &l);
      return dot(o, dod);
    };
    const Vec gq = numeric_grad([&](const Vec& x) { return loss(x, kd, vd); }, qd);
    const Vec gk = numeric_grad([&](const Vec& x) { return loss(qd, x, vd); }, kd);
    const Vec gv = numeric_grad([&](const Vec& x) { return loss(qd, kd, x); }, vd);
    EXPECT_LT(rel_err_vec(down(dq), plus(dq0, gq)), 1e-5);
    EXPECT_LT(rel_err_vec(down(dk), plus(dk0, gk)), 1e-5);
    EXPECT_LT(rel_err_vec(down(dv), plus(dv0, gv)), 1e-5);
    // Keys that no query of the call sees keep their gradient exactly.
    const Vec dkg = down(dk), dvg = down(dv);
    for (int64_t j = c.q_offset + c.n; j < c.tk; ++j)
      for (int64_t e = 0; e < Gh; ++e) {
        EXPECT_EQ(dkg[j * Gh + e], dk0[j * Gh + e]) << "key " << j;
        EXPECT_EQ(dvg[j * Gh + e], dv0[j * Gh + e]) << "key " << j;
      }
  }
}

// dq, dk, dv of L = sum(out * dout) from the forward's out and lse as the backward reads them:
// P = exp(scale q.k - lse), D = rowsum(dout * out), dS = P (dout.v - D).
void ref_attention_backward(const AttentionCase& c, const std::vector<int32_t>& seg, const Vec& q,
                            const Vec& k, const Vec& v, const Vec& out, const Vec& lse,
                            const Vec& dout, Vec* dq, Vec* dk, Vec* dv) {
  const int64_t H = c.H, G = c.G, h = c.h, group = H / G;
  const double scale = c.dims().scale;
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  for (int64_t i = 0; i < c.n; ++i) {
    const int64_t row = c.q_offset + i;
    for (int64_t hq = 0; hq < H; ++hq) {
      const int64_t g = hq / group, qo = (i * H + hq) * h;
      double D = 0;
      for (int64_t e = 0; e < h; ++e) D += dout[qo + e] * out[qo + e];
      for (int64_t j = c.first_key(seg, row); j <= row; ++j) {
        const int64_t ko = (j * G + g) * h;
        double s = 0, dp = 0;
        for (int64_t e = 0; e < h; ++e) {
          s += q[qo + e] * k[ko + e];
          dp += dout[qo + e] * v[ko + e];
        }
        const double p = std::exp(scale * s - lse[i * H + hq]), ds = p * (dp - D) * scale;
        for (int64_t e = 0; e < h; ++e) {
          (*dq)[qo + e] += ds * k[ko + e];
          (*dk)[ko + e] += ds * q[qo + e];
          (*dv)[ko + e] += p * dout[qo + e];
        }
      }
    }
  }
}

// Forward: every combination of F32 and BF16 for out, q, k, v. Backward: every combination for
// dq, dk, dv, dout, q, k, v, out (out holding the forward's fp32 output, or it rounded to bf16),
// onto non-zero gradients. Keys that no query sees keep their gradient exactly in every dtype.
// A BF16 out gives the gradients of the unrounded out (D from P and dP, backend.h): the
// reference takes D from the fp32 out in both cases.
TEST_P(BackendOps, AttentionBf16EveryDtypeCombination) {
  const std::vector<AttentionCase> cases = {
      {"gqa_chunk", 4, 2, 8, {5, 7, 4}, 6, 8, 16},
      {"mha_whole", 2, 2, 4, {9}, 0, 9, 9},
      {"mqa_one_row", 3, 1, 6, {4, 6}, 7, 1, 8},
      {"gqa_window3", 4, 2, 8, {5, 11, 4}, 6, 10, 20, 3},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t Hh = c.H * c.h, Gh = c.G * c.h;
    const std::vector<int32_t> seg = c.seg_start();
    Buffer seg_start = ids(seg);
    const Vec qd = randb(c.n * Hh, 2.0f), kd = randb(c.tk * Gh), vd = randb(c.tk * Gh);
    const Vec dod = randb(c.n * Hh), dq0 = randb(c.n * Hh), dk0 = randb(c.tk * Gh),
              dv0 = randb(c.tk * Gh);
    Vec ref_out, ref_lse;
    if (computes()) ref_attention(c, seg, qd, kd, vd, &ref_out, &ref_lse);
    Vec out32(static_cast<size_t>(c.n * Hh), 0.0), lse32(static_cast<size_t>(c.n * c.H), 0.0);
    for (int combo = 0; combo < 16; ++combo) {
      SCOPED_TRACE("out q k v: " + test::combo_name(combo, 4));
      const DType dout_t = test::dtype_combo(combo, 0);
      Buffer out = zeros({c.n, Hh}, dout_t), lse = zeros({c.n, c.H});
      Buffer q = up(qd, {c.n, Hh}, test::dtype_combo(combo, 1));
      Buffer k = up(kd, {c.tk, Gh}, test::dtype_combo(combo, 2));
      Buffer v = up(vd, {c.tk, Gh}, test::dtype_combo(combo, 3));
      be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg_start.view(),
                           c.q_offset, c.dims());
      if (!computes()) continue;
      test::expect_close(down(out), ref_out, dout_t, 1e-5, "out");
      test::expect_close(down(lse), ref_lse, DType::F32, 1e-5, "lse");
      if (combo == 0) {
        out32 = down(out);
        lse32 = down(lse);
      }
    }
    Buffer lse = up(lse32, {c.n, c.H});
    Vec ref[3];  // dq, dk, dv
    if (computes()) {
      ref_attention_backward(c, seg, qd, kd, vd, out32, lse32, dod, &ref[0], &ref[1], &ref[2]);
      ref[0] = plus(dq0, ref[0]);
      ref[1] = plus(dk0, ref[1]);
      ref[2] = plus(dv0, ref[2]);
    }
    for (int combo = 0; combo < 256; ++combo) {
      SCOPED_TRACE("dq dk dv dout q k v out: " + test::combo_name(combo, 8));
      DType dt[8];
      for (int i = 0; i < 8; ++i) dt[i] = test::dtype_combo(combo, i);
      Buffer dq = up(dq0, {c.n, Hh}, dt[0]), dk = up(dk0, {c.tk, Gh}, dt[1]);
      Buffer dv = up(dv0, {c.tk, Gh}, dt[2]), dout = up(dod, {c.n, Hh}, dt[3]);
      Buffer q = up(qd, {c.n, Hh}, dt[4]), k = up(kd, {c.tk, Gh}, dt[5]);
      Buffer v = up(vd, {c.tk, Gh}, dt[6]), out = up(out32, {c.n, Hh}, dt[7]);
      be.attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                            v.view(), out.view(), lse.view(), seg_start.view(), c.q_offset,
                            c.dims());
      if (!computes()) continue;
      const Vec dqg = down(dq), dkg = down(dk), dvg = down(dv);
      test::expect_close(dqg, ref[0], dt[0], 1e-5, "dq");
      test::expect_close(dkg, ref[1], dt[1], 1e-5, "dk");
      test::expect_close(dvg, ref[2], dt[2], 1e-5, "dv");
      for (int64_t j = c.q_offset + c.n; j < c.tk; ++j)
        for (int64_t e = 0; e < Gh; ++e) {
          ASSERT_EQ(dkg[j * Gh + e], dk0[j * Gh + e]) << "key " << j;
          ASSERT_EQ(dvg[j * Gh + e], dv0[j * Gh + e]) << "key " << j;
        }
    }
  }
}

// Head dims and lengths of real models: several key tiles and row blocks per call, head_dim
// 16 to 128 (the CUDA backend's tensor-core kernels take head_dim % 16 == 0; the cases above,
// head_dim 4 to 8, run its fp32 kernels). Against the float64 reference only (the cases above
// check it by finite differences), all-F32 and in the engine's mix: BF16 q, k, v, out with F32
// dout and gradients (D from P and dP, backend.h).
TEST_P(BackendOps, AttentionModelHeadDimsAcrossTiles) {
  const std::vector<AttentionCase> cases = {
      {"h16_gqa_three_segments", 4, 2, 16, {40, 57, 63}, 60, 100, 160},
      {"h64_mqa_window", 4, 1, 64, {30, 130}, 40, 120, 160, 37},
      {"h128_mha_whole", 2, 2, 128, {150}, 0, 150, 150},
      {"h128_gqa_chunk_before_more_keys", 4, 2, 128, {100, 100}, 50, 70, 200},
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t Hh = c.H * c.h, Gh = c.G * c.h;
    const std::vector<int32_t> seg = c.seg_start();
    Buffer seg_start = ids(seg);
    const Vec qd = randb(c.n * Hh, 2.0f), kd = randb(c.tk * Gh), vd = randb(c.tk * Gh);
    const Vec dod = randn(c.n * Hh), dq0 = randn(c.n * Hh), dk0 = randn(c.tk * Gh),
              dv0 = randn(c.tk * Gh);
    for (const DType act : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(act == DType::BF16 ? "bf16 q k v out" : "f32");
      Buffer q = up(qd, {c.n, Hh}, act), k = up(kd, {c.tk, Gh}, act), v = up(vd, {c.tk, Gh}, act);
      Buffer out = zeros({c.n, Hh}, act), lse = zeros({c.n, c.H});
      Buffer out32 = zeros({c.n, Hh});
      be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg_start.view(),
                           c.q_offset, c.dims());
      be.attention_forward(out32.view(), lse.view(), q.view(), k.view(), v.view(),
                           seg_start.view(), c.q_offset, c.dims());
      Buffer dq = up(dq0, {c.n, Hh}), dk = up(dk0, {c.tk, Gh}), dv = up(dv0, {c.tk, Gh});
      Buffer dout = up(dod, {c.n, Hh});
      be.attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                            v.view(), out.view(), lse.view(), seg_start.view(), c.q_offset,
                            c.dims());
      if (!computes()) continue;
      Vec ref_out, ref_lse, ref_dq, ref_dk, ref_dv;
      ref_attention(c, seg, qd, kd, vd, &ref_out, &ref_lse);
      test::expect_close(down(out), ref_out, act, 1e-5, "out");
      test::expect_close(down(lse), ref_lse, DType::F32, 1e-5, "lse");
      // The backward's result is that of the unrounded out (backend.h): the reference's D is
      // taken from the F32 forward.
      ref_attention_backward(c, seg, qd, kd, vd, down(out32), down(lse), dod, &ref_dq, &ref_dk,
                             &ref_dv);
      EXPECT_LT(rel_err_vec(down(dq), plus(dq0, ref_dq)), 1e-5);
      EXPECT_LT(rel_err_vec(down(dk), plus(dk0, ref_dk)), 1e-5);
      EXPECT_LT(rel_err_vec(down(dv), plus(dv0, ref_dv)), 1e-5);
    }
  }
}

// A key offset (AttentionDims::k_offset; engine/window_stream.h): keys [k0, tk) only, k0 at or
// before every query row's window start, give on every backend the bits of the same call on all
// keys [0, tk) (out, lse, dq, and dk/dv of rows [k0, tk)), with the same FLOP count: the CPU's
// head dims 8 and 64; on CUDA the fp32 kernels (h 8) and the tensor-core ones (h 64), k0 inside
// and on a tile, F32 and BF16 q, k, v, out.
TEST_P(BackendOps, AttentionKeyOffsetGivesTheBitsOfAllKeys) {
  struct OffsetCase {
    AttentionCase c;
    int64_t k0;
  };
  const std::vector<OffsetCase> cases = {
      {{"h8_gqa_window5", 4, 2, 8, {9, 41}, 20, 25, 50, 5}, 16},
      {{"h8_mqa_window9_segment", 3, 1, 8, {3, 30}, 18, 12, 33, 9}, 3},
      {{"h64_mqa_window37", 4, 1, 64, {30, 130}, 100, 60, 160, 37}, 64},
      {{"h64_gqa_window40_k0_inside_tile", 4, 2, 64, {200}, 120, 70, 190, 40}, 70},
  };
  for (const OffsetCase& oc : cases) {
    const AttentionCase& c = oc.c;
    const int64_t Hh = c.H * c.h, Gh = c.G * c.h, k0 = oc.k0, nk = c.tk - k0;
    ASSERT_LE(k0, c.q_offset - c.window + 1);
    Buffer seg_start = ids(c.seg_start());
    const Vec qd = randb(c.n * Hh, 2.0f), kd = randb(c.tk * Gh), vd = randb(c.tk * Gh);
    const Vec dod = randn(c.n * Hh), dk0 = randn(c.tk * Gh), dv0 = randn(c.tk * Gh);
    const auto tail = [&](const Vec& x) { return Vec(x.begin() + k0 * Gh, x.end()); };
    for (const DType act : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(c.name) + (act == DType::BF16 ? " bf16" : " f32"));
      struct Run {
        Vec out, lse, dq, dk, dv;
        int64_t fwd = 0, bwd = 0;
      };
      auto run = [&](bool offset) {
        AttentionDims dims = c.dims();
        dims.k_offset = offset ? k0 : 0;
        const Vec kk = offset ? tail(kd) : kd, vv = offset ? tail(vd) : vd;
        const int64_t rows = offset ? nk : c.tk;
        Buffer q = up(qd, {c.n, Hh}, act), k = up(kk, {rows, Gh}, act), v = up(vv, {rows, Gh}, act);
        Buffer out = zeros({c.n, Hh}, act), lse = zeros({c.n, c.H});
        Buffer dq = zeros({c.n, Hh});
        Buffer dk = up(offset ? tail(dk0) : dk0, {rows, Gh}),
               dv = up(offset ? tail(dv0) : dv0, {rows, Gh});
        Buffer dout = up(dod, {c.n, Hh});
        Run r;
        be.reset_flops();
        be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg_start.view(),
                             c.q_offset, dims);
        be.synchronize();  // the CUDA backend counts attention's FLOPs on the device
        r.fwd = be.flops();
        be.reset_flops();
        be.attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                              v.view(), out.view(), lse.view(), seg_start.view(), c.q_offset, dims);
        be.synchronize();
        r.bwd = be.flops();
        if (!computes()) return r;
        r.out = down(out);
        r.lse = down(lse);
        r.dq = down(dq);
        r.dk = down(dk);
        r.dv = down(dv);
        if (!offset) {
          r.dk = tail(r.dk);
          r.dv = tail(r.dv);
        }
        return r;
      };
      const Run all = run(false), win = run(true);
      EXPECT_EQ(win.fwd, all.fwd);
      EXPECT_EQ(win.bwd, all.bwd);
      EXPECT_TRUE(win.out == all.out);
      EXPECT_TRUE(win.lse == all.lse);
      EXPECT_TRUE(win.dq == all.dq);
      EXPECT_TRUE(win.dk == all.dk);
      EXPECT_TRUE(win.dv == all.dv);
    }
  }
}

// A sliding window cuts the work on every backend: the computing ones count the tile products
// they skip, the planner (meta) counts the (query, key) pairs the window allows,
// 4 h H per pair forward and 10 h H backward, exactly.
TEST_P(BackendOps, AttentionWindowCountsOnlyTheWindow) {
  // queries [100, 300) of one 300-row sequence: rows below and past the window of 150
  int64_t fwd_no_window = 0, bwd_no_window = 0;
  for (const int64_t window : {int64_t{0}, int64_t{150}, int64_t{16}}) {
    SCOPED_TRACE(window);
    const AttentionCase c{"window_flops", 2, 1, 8, {300}, 100, 200, 300, window};
    const int64_t Hh = c.H * c.h, Gh = c.G * c.h;
    Buffer q = rand({c.n, Hh}), k = rand({c.tk, Gh}), v = rand({c.tk, Gh});
    Buffer out = zeros({c.n, Hh}), lse = zeros({c.n, c.H}), seg_start = ids(c.seg_start());
    Buffer dq = zeros({c.n, Hh}), dk = zeros({c.tk, Gh}), dv = zeros({c.tk, Gh});
    be.reset_flops();
    be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg_start.view(),
                         c.q_offset, c.dims());
    be.synchronize();  // the CUDA backend counts attention's FLOPs on the device
    const int64_t fwd = be.flops();
    be.reset_flops();
    be.attention_backward(dq.view(), dk.view(), dv.view(), out.view(), q.view(), k.view(), v.view(),
                          out.view(), lse.view(), seg_start.view(), c.q_offset, c.dims());
    be.synchronize();
    const int64_t bwd = be.flops();
    int64_t pairs = 0;
    for (int64_t row = c.q_offset; row < c.q_offset + c.n; ++row)
      pairs += row - c.first_key(c.seg_start(), row) + 1;
    // computed pairs >= allowed ones; the planner counts exactly the allowed ones
    EXPECT_GE(fwd, 4 * c.h * c.H * pairs);
    EXPECT_GE(bwd, 10 * c.h * c.H * pairs);
    if (!computes()) {
      EXPECT_EQ(fwd, 4 * c.h * c.H * pairs);
      EXPECT_EQ(bwd, 10 * c.h * c.H * pairs);
    }
    if (window == 0) {
      fwd_no_window = fwd;
      bwd_no_window = bwd;
    } else {
      EXPECT_LT(fwd, fwd_no_window);
      EXPECT_LT(bwd, bwd_no_window);
    }
  }
}

TEST_P(BackendOps, AttentionRejectsBadSegmentStarts) {
  const AttentionCase c{"bad_seg", 2, 1, 4, {6}, 0, 6, 6};
  Buffer q = rand({6, 8}), k = rand({6, 4}), v = rand({6, 4});
  Buffer out = zeros({6, 8}), lse = zeros({6, 2});
  Buffer past_row = ids({0, 0, 0, 4, 0, 0});    // seg_start[3] = 4 > 3
  Buffer decreasing = ids({0, 0, 2, 2, 1, 1});  // not monotone
  be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(),
                       ids({0, 0, 0, 0, 0, 0}).view(), 0, c.dims());
  if (!computes()) return;  // segment contents: only a backend with the data can check them
  // Reported by the op or, on a GPU, at the next synchronisation (Backend::synchronize).
  EXPECT_THROW(
      {
        be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(),
                             past_row.view(), 0, c.dims());
        be.synchronize();
      },
      ShapeError);
  EXPECT_THROW(
      {
        be.attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(),
                             decreasing.view(), 0, c.dims());
        be.synchronize();
      },
      ShapeError);
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(test::all_backends()),
                         test::BackendCaseName{});

}  // namespace
}  // namespace sbp
