// The dense and elementwise ops of every backend (backend_suite.h): gemm, fill, fill_normal, copy,
// add_inplace, scale_inplace, sum_squares, add_bias / bias_backward, adamw_step, against float64
// references written here; bias_backward also against central finite differences. Each also
// with BF16 operands, in every combination of F32 and BF16 (backend_suite.h).
#include <cmath>
#include <vector>

#include "backend/backend_suite.h"
#include "core/counter_normal.h"

namespace sbp {
namespace {

using test::BackendOps;
using test::rel_err_vec;
using test::Vec;

TEST_P(BackendOps, GemmAllTransposesAccumulate) {
  const int64_t M = 5, N = 4, K = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Vec a, b, c;
      Buffer A = ta ? rand({K, M}, 1.0f, &a) : rand({M, K}, 1.0f, &a);
      Buffer B = tb ? rand({N, K}, 1.0f, &b) : rand({K, N}, 1.0f, &b);
      Buffer C = rand({M, N}, 1.0f, &c);
      Vec expect = c;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
          expect[i * N + j] = 0.5 * expect[i * N + j] + 2.0 * s;
        }
      be.reset_flops();
      be.gemm(C.view(), A.view(), ta, B.view(), tb, 2.0f, 0.5f);
      EXPECT_EQ(be.flops(), 2 * M * N * K);  // every backend counts 2MNK
      if (computes()) {
        EXPECT_LT(rel_err_vec(down(C), expect), 1e-6);
      }
    }
  Buffer A = rand({M, K}), B = rand({M, N}), C = rand({M, N});
  EXPECT_THROW(be.gemm(C.view(), A.view(), false, B.view(), false, 1, 0), ShapeError);
}

// x W^T with few rows of x (the CPU backend's skinny path, gemm_skinny.h, for M <= 16; sgemm
// above): every M around the threshold, K and N around the kernel's blocks of 16 and 4, and
// beta = 0 over NaN (overwritten), beta = 1 (accumulated). Each element is judged against the
// sum of its terms' magnitudes: a single element of a dot product can cancel to far below its
// terms, and its fp32 rounding is relative to them, not to the result. The bound is the one
// every correct fp32 dot product meets, whatever its order and with or without FMA:
// |fl(sum) - sum| <= gamma_K sum |a_k w_k|, gamma_K ~ K u (Higham, Accuracy and Stability of
// Numerical Algorithms, eq. 3.5), plus two roundings for alpha and the beta C term. (It was
// 2e-7 x the magnitudes, about 3.4 u, which is below what a correct kernel may round to from
// K = 4 on: BLIS's generic sgemm kernel, plain multiply-then-add, went to 4.1 u at K = 16 on
// this data, and OpenBLAS exceeds 3.4 u at K = 16..300 on other seeds. A dropped or doubled
// term, a wrong index or bf16 arithmetic are still off by orders of magnitude more.)
TEST_P(BackendOps, GemmFewRowsTimesTransposedWeight) {
  for (int64_t M : {1, 2, 7, 16, 17})
    for (int64_t K : {1, 5, 16, 37, 300})
      for (int64_t N : {1, 3, 4, 130}) {
        SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" +
                     std::to_string(N));
        Vec a, w, c;
        Buffer A = rand({M, K}, 1.0f, &a);
        Buffer W = rand({N, K}, 1.0f, &w);
        Buffer C = rand({M, N}, 1.0f, &c);
        Buffer D = up(Vec(static_cast<size_t>(M * N), NAN), {M, N});
        be.gemm(C.view(), A.view(), false, W.view(), true, 1.5f, 1.0f);
        be.gemm(D.view(), A.view(), false, W.view(), true, -1.0f, 0.0f);
        if (!computes()) continue;
        const Vec got_c = down(C), got_d = down(D);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              s += a[i * K + k] * w[j * K + k];
              mag += std::fabs(a[i * K + k] * w[j * K + k]);
            }
            const size_t e = static_cast<size_t>(i * N + j);
            const double bound = static_cast<double>(K + 2) * std::ldexp(1.0, -24);  // (K+2) u
            EXPECT_NEAR(got_c[e], c[e] + 1.5 * s, bound * (std::fabs(c[e]) + 1.5 * mag) + 1e-30)
                << i << "," << j;
            EXPECT_NEAR(got_d[e], -s, bound * mag + 1e-30) << i << "," << j;
          }
      }
}

// K = 0: C = beta * C (no product to add), including beta = 0 over NaN.
TEST_P(BackendOps, GemmWithEmptyInnerDimensionScalesC) {
  const int64_t M = 3, N = 2;
  Buffer A = zeros({M, 0}), B = zeros({0, N});
  Vec c;
  Buffer C = rand({M, N}, 1.0f, &c);
  be.gemm(C.view(), A.view(), false, B.view(), false, 1.0f, 0.5f);
  Buffer D = up(Vec(static_cast<size_t>(M * N), NAN), {M, N});
  be.gemm(D.view(), A.view(), false, B.view(), false, 1.0f, 0.0f);
  if (!computes()) return;
  for (double& x : c) x *= 0.5;
  EXPECT_EQ(down(C), c);
  EXPECT_EQ(down(D), Vec(static_cast<size_t>(M * N), 0.0));
}

TEST_P(BackendOps, FillAddScale) {
  const int64_t n = 3, m = 7;
  Buffer x = rand({n, m});
  be.fill(x.view(), -2.5f);
  Vec y0, dx;
  Buffer y = rand({n, m}, 1.0f, &y0), d = rand({n * m}, 1.0f, &dx);  // same numel, other shape
  be.add_inplace(y.view(), d.view());
  be.scale_inplace(y.view(), 0.25f);
  if (!computes()) return;
  EXPECT_EQ(down(x), Vec(static_cast<size_t>(n * m), -2.5));
  Vec expect(y0.size());
  for (size_t i = 0; i < y0.size(); ++i)
    expect[i] = static_cast<double>(static_cast<float>(y0[i] + dx[i]) * 0.25f);
  EXPECT_EQ(down(y), expect);  // one fp32 add and one exact scale per element
}

TEST_P(BackendOps, SumSquaresInFloat64) {
  const int64_t n = 1000;
  Vec x;
  Buffer t = rand({n}, 3.0f, &x);
  const double got = be.sum_squares(t.view());
  if (!computes()) return;
  double ss = 0;
  for (double v : x) ss += v * v;
  EXPECT_NEAR(got, ss, 1e-12 * ss);
}

// Each tensor's sum apart, in one call: the bits of one call per tensor.
TEST_P(BackendOps, SumSquaresEachGivesEachTensorsSum) {
  Buffer a = rand({300}, 2.0f), b = rand({7, 3}, 1.0f);
  const std::vector<Tensor> both{a.view(), b.view()};
  std::vector<double> each(2);
  be.sum_squares_each(both, each);
  if (!computes()) return;
  EXPECT_EQ(each[0], be.sum_squares(a.view()));
  EXPECT_EQ(each[1], be.sum_squares(b.view()));
  std::vector<double> wrong(1);
  EXPECT_THROW(be.sum_squares_each(both, wrong), ShapeError);
}

// A read left for the next wait holds src's values as they were when it was queued once the
// backend has waited (finish_reads waits if nothing else did), whatever is queued after it;
// only F32 tensors of the backend are read this way.
TEST_P(BackendOps, ReadAtTheNextWaitHoldsTheQueuedValues) {
  Vec x;
  Buffer t = rand({7}, 2.0f, &x);
  const std::shared_ptr<std::vector<float>> got = be.download_at_next_wait(t.view());
  be.fill(t.view(), 5.0f);
  be.finish_reads();
  ASSERT_EQ(got->size(), 7u);
  if (!computes()) return;
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ((*got)[i], static_cast<float>(x[i])) << i;
  Buffer b = up(Vec(3, 1.0), {3}, DType::BF16);
  EXPECT_THROW(be.download_at_next_wait(b.view()), ShapeError);
}

TEST_P(BackendOps, BiasAndReductions) {
  const int64_t n = 9, m = 4;
  Vec yd, bd, dbd;
  Buffer y = rand({n, m}, 1.0f, &yd), b = rand({m}, 1.0f, &bd), db = rand({m}, 1.0f, &dbd);
  Vec expect_y = yd, expect_db = dbd;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      expect_db[j] += yd[i * m + j];
      expect_y[i * m + j] += bd[j];
    }
  be.bias_backward(db.view(), y.view());
  const Vec db_once = computes() ? down(db) : Vec();
  be.add_bias(y.view(), b.view());
  const double ss_got = be.sum_squares(y.view());
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(db_once, expect_db), 1e-6);
  const Vec y_after = down(y);
  EXPECT_LT(rel_err_vec(y_after, expect_y), 1e-7);
  double ss = 0;
  for (double v : y_after) ss += v * v;
  EXPECT_NEAR(ss_got, ss, 1e-9 * ss);
  // bias_backward against central differences of L(b) = sum((y + b) * R), accumulated onto
  // the non-zero db it started from.
  const Vec R = yd;  // dy = the original y
  const Vec fd = test::numeric_grad(
      [&](const Vec& bv) {
        double L = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < m; ++j) L += (yd[i * m + j] + bv[j]) * R[i * m + j];
        return L;
      },
      bd);
  EXPECT_LT(rel_err_vec(db_once, test::plus(dbd, fd)), 1e-6);
}

TEST_P(BackendOps, CopyConvertsBf16RoundToNearestEven) {
  Buffer src = up({1.0,
                   1.0 + 1.0 / 256.0,  // exactly halfway: rounds to even (1.0)
                   1.0 + 3.0 / 256.0,  // halfway, rounds up to even
                   -3.140625},
                  {4});
  Buffer mid = up(Vec(4, 0.0), {4}, DType::BF16);
  Buffer back = zeros({4});
  be.copy(mid.view(), src.view());
  be.copy(back.view(), mid.view());
  if (!computes()) return;
  const Vec b = down(back);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 1.0f);
  EXPECT_EQ(b[2], 1.0f + 4.0f / 256.0f);
  EXPECT_EQ(b[3], -3.140625f);
}

TEST_P(BackendOps, CopySameDtypeAnyShape) {
  Vec x;
  Buffer src = rand({3, 4}, 1.0f, &x), dst = zeros({12});
  Buffer isrc = ids({5, -1, 7}), idst = ids({0, 0, 0});
  Buffer bsrc = up({1.5, -2.0}, {2}, DType::BF16), bdst = up({0.0, 0.0}, {1, 2}, DType::BF16);
  be.copy(dst.view(), src.view());
  be.copy(idst.view(), isrc.view());
  be.copy(bdst.view(), bsrc.view());
  if (!computes()) return;
  EXPECT_EQ(down(dst), x);
  EXPECT_EQ(down(idst), Vec({5, -1, 7}));
  EXPECT_EQ(down(bdst), Vec({1.5, -2.0}));
}

TEST_P(BackendOps, AdamWMatchesTorchFormula) {
  const int64_t n = 6;
  Vec p0, g0, m0, v0(n);
  Buffer p = rand({n}, 1.0f, &p0), g = rand({n}, 1.0f, &g0), m = rand({n}, 0.1f, &m0);
  for (int64_t i = 0; i < n; ++i) v0[i] = static_cast<double>(0.01f * static_cast<float>(i + 1));
  Buffer v = up(v0, {n});
  AdamWStep s{
      .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3};
  be.adamw_step(p.view(), g.view(), m.view(), v.view(), s);
  if (!computes()) return;
  const Vec pg = down(p), mg = down(m), vg = down(v);
  for (int64_t i = 0; i < n; ++i) {
    double pp = p0[i] * (1 - 1e-2 * 0.1);
    const double mm = 0.9 * m0[i] + 0.1 * g0[i], vv = 0.95 * v0[i] + 0.05 * g0[i] * g0[i];
    const double mhat = mm / (1 - std::pow(0.9, 3)), vhat = vv / (1 - std::pow(0.95, 3));
    pp -= 1e-2 * mhat / (std::sqrt(vhat) + 1e-8);
    EXPECT_NEAR(pg[i], pp, 1e-6 * std::max(1.0, std::fabs(pp)));
    EXPECT_NEAR(mg[i], mm, 1e-6);
    EXPECT_NEAR(vg[i], vv, 1e-7);
  }
}

// ---- BF16 operands (backend_suite.h: bf16-representable inputs, tolerances by output dtype) ----

// Every combination of F32 and BF16 for C, A, B, every transpose, beta = 0 (over NaN), 0.5 and
// 1 (accumulation). The shapes cross the CPU's GEMM blocks (1024 rows or columns of C, 512 of
// the inner dimension: gemm_bf16.cpp) in M, in N and in K.
TEST_P(BackendOps, GemmBf16EveryDtypeCombination) {
  struct Dims {
    int64_t M, N, K;
  };
  for (const Dims& dm : {Dims{1030, 9, 520}, Dims{7, 1030, 520}, Dims{5, 4, 3}}) {
    const int64_t M = dm.M, N = dm.N, K = dm.K;
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const Vec a = randb(M * K), b = randb(K * N), c0 = randb(M * N);
        Vec prod(static_cast<size_t>(M * N));  // op(A) op(B) in float64
        if (computes()) {
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = 0;
              for (int64_t k = 0; k < K; ++k)
                s += (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
              prod[i * N + j] = s;
            }
        }
        const Shape sa = ta ? Shape{K, M} : Shape{M, K}, sb = tb ? Shape{N, K} : Shape{K, N};
        for (int combo = 0; combo < 8; ++combo) {
          const DType dc = test::dtype_combo(combo, 0), da = test::dtype_combo(combo, 1),
                      db = test::dtype_combo(combo, 2);
          SCOPED_TRACE(::testing::Message()
                       << "M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb
                       << " C A B " << test::combo_name(combo, 3));
          Buffer A = up(a, sa, da), B = up(b, sb, db);
          Buffer C = up(c0, {M, N}, dc), D = up(c0, {M, N}, dc);
          Buffer E = up(Vec(static_cast<size_t>(M * N), NAN), {M, N}, dc);
          be.reset_flops();
          be.gemm(C.view(), A.view(), ta, B.view(), tb, 2.0f, 0.5f);
          EXPECT_EQ(be.flops(), 2 * M * N * K);
          be.gemm(D.view(), A.view(), ta, B.view(), tb, 1.0f, 1.0f);
          be.gemm(E.view(), A.view(), ta, B.view(), tb, -1.0f, 0.0f);
          if (!computes()) continue;
          Vec ec(c0.size()), ed(c0.size()), ee(c0.size());
          for (size_t i = 0; i < c0.size(); ++i) {
            ec[i] = 0.5 * c0[i] + 2.0 * prod[i];
            ed[i] = c0[i] + prod[i];
            ee[i] = -prod[i];
          }
          // fp32 sums of K = 520 terms: 1e-5 of the largest element, as for fp32 inputs.
          test::expect_close(down(C), ec, dc, 1e-5, "beta 0.5");
          test::expect_close(down(D), ed, dc, 1e-5, "beta 1");
          test::expect_close(down(E), ee, dc, 1e-5, "beta 0 over NaN");
        }
      }
  }
}

// C += A B with a BF16 C is summed in fp32 over the whole inner dimension and rounded once: K
// terms of 2^-18 each add up to one bf16 ulp of 1 (2^-7), while any 512 of them (2^-9) are
// less than half an ulp and would be lost by a rounding per block of the inner dimension.
TEST_P(BackendOps, GemmIntoBf16RoundsOncePerCall) {
  const int64_t K = 2048;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Buffer A = up(Vec(K, 1.0), {1, K}, dt), B = up(Vec(K, std::ldexp(1.0, -18)), {K, 1}, dt);
    Buffer C = up({1.0}, {1, 1}, DType::BF16), F = up({1.0}, {1, 1});
    be.gemm(C.view(), A.view(), false, B.view(), false, 1.0f, 1.0f);
    be.gemm(F.view(), A.view(), false, B.view(), false, 1.0f, 1.0f);
    if (!computes()) continue;
    EXPECT_EQ(down(C)[0], 1.0 + std::ldexp(1.0, -7));
    EXPECT_EQ(down(F)[0], 1.0 + std::ldexp(1.0, -7));
  }
}

// fill, add_inplace and scale_inplace on BF16: one fp32 operation per element, rounded once.
TEST_P(BackendOps, FillAddScaleBf16) {
  const int64_t n = 3, m = 7;
  Buffer f = zeros({n, m}, DType::BF16);
  be.fill(f.view(), 0.1f);
  const Vec y0 = randb(n * m), x = randn(n * m);  // x: fp32 values, rounded where BF16
  std::vector<Buffer> ys;
  for (int combo = 0; combo < 4; ++combo) {
    ys.push_back(up(y0, {n, m}, test::dtype_combo(combo, 0)));
    Buffer xb = up(x, {n * m}, test::dtype_combo(combo, 1));
    be.add_inplace(ys.back().view(), xb.view());
    be.scale_inplace(ys.back().view(), 0.3f);
  }
  if (!computes()) return;
  EXPECT_EQ(down(f), Vec(static_cast<size_t>(n * m), test::round_bf16(0.1f)));
  for (int combo = 0; combo < 4; ++combo) {
    SCOPED_TRACE(test::combo_name(combo, 2));
    const bool y16 = test::dtype_combo(combo, 0) == DType::BF16;
    const bool x16 = test::dtype_combo(combo, 1) == DType::BF16;
    Vec expect(y0.size());
    for (size_t i = 0; i < y0.size(); ++i) {
      const float xi = static_cast<float>(x16 ? test::round_bf16(x[i]) : x[i]);
      double v = static_cast<float>(y0[i]) + xi;  // fp32 add
      if (y16) v = test::round_bf16(v);
      v = static_cast<float>(v) * 0.3f;  // fp32 scale
      expect[i] = y16 ? test::round_bf16(v) : v;
    }
    EXPECT_EQ(down(ys[static_cast<size_t>(combo)]), expect);
  }
}

// fill_normal on every backend is the counter formula (core/counter_normal.h) to the bit, F32
// and BF16 (that value rounded once); a tensor filled in two pieces at their offsets is the
// tensor filled whole; another stream gives other numbers; and the numbers look normal: mean and
// variance within 5 standard errors of n draws, each tail's share within 5 of its.
TEST_P(BackendOps, FillNormalIsTheCounterFormula) {
  const int64_t n = 20011, cut = 7001;
  const float mean = 0.5f, std = 2.0f;
  Buffer x = zeros({n, 1}), y = zeros({n, 1}, DType::BF16), pieces = zeros({n, 1});
  Buffer other = zeros({n, 1});
  be.fill_normal(x.view(), mean, std, 17, 3);
  be.fill_normal(y.view(), mean, std, 17, 3);
  be.fill_normal(pieces.view().slice_rows(0, cut), mean, std, 17, 3, 0);
  be.fill_normal(pieces.view().slice_rows(cut, n), mean, std, 17, 3, cut);
  be.fill_normal(other.view(), mean, std, 17, 4);
  if (!computes()) return;
  const Vec gx = down(x), gy = down(y), gp = down(pieces), go = down(other);
  const uint64_t key = counter_normal_key(17, 3);
  double sum = 0, sum2 = 0;
  int64_t tail1 = 0, tail2 = 0, same_other = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = counter_normal_value(key, static_cast<uint64_t>(i), mean, std);
    ASSERT_EQ(gx[i], want) << i;
    ASSERT_EQ(gy[i], test::round_bf16(want)) << i;
    ASSERT_EQ(gp[i], want) << i;
    same_other += go[i] == gx[i];
    const double z = (gx[i] - mean) / std;
    sum += z;
    sum2 += z * z;
    tail1 += std::fabs(z) > 1.0;
    tail2 += std::fabs(z) > 2.0;
  }
  EXPECT_LT(same_other, 10);
  const double N = static_cast<double>(n);
  EXPECT_LT(std::fabs(sum / N), 5.0 / std::sqrt(N));
  EXPECT_LT(std::fabs(sum2 / N - 1.0), 5.0 * std::sqrt(2.0 / N));
  // P(|z| > 1) = 0.3173, P(|z| > 2) = 0.0455.
  EXPECT_LT(std::fabs(tail1 / N - 0.3173), 5.0 * std::sqrt(0.3173 * 0.6827 / N));
  EXPECT_LT(std::fabs(tail2 / N - 0.0455), 5.0 * std::sqrt(0.0455 * 0.9545 / N));
}

TEST_P(BackendOps, SumSquaresOfBf16InFloat64) {
  const int64_t n = 1000;
  const Vec x = randb(n, 3.0f);
  Buffer t = up(x, {n}, DType::BF16);
  const double got = be.sum_squares(t.view());
  if (!computes()) return;
  double ss = 0;
  for (double v : x) ss += v * v;
  EXPECT_NEAR(got, ss, 1e-12 * ss);
}

// add_bias and bias_backward in every dtype combination; bias_backward's sum over rows is
// rounded once into a BF16 db.
TEST_P(BackendOps, BiasBf16EveryDtypeCombination) {
  const int64_t n = 9, m = 4;
  const Vec yd = randb(n * m), bd = randb(m), dbd = randb(m);
  Vec expect_y = yd, expect_db = dbd;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      expect_db[j] += yd[i * m + j];
      expect_y[i * m + j] += bd[j];
    }
  for (int combo = 0; combo < 4; ++combo) {
    SCOPED_TRACE(test::combo_name(combo, 2));
    const DType d0 = test::dtype_combo(combo, 0), d1 = test::dtype_combo(combo, 1);
    Buffer db = up(dbd, {m}, d0), dy = up(yd, {n, m}, d1);
    be.bias_backward(db.view(), dy.view());
    Buffer y = up(yd, {n, m}, d0), b = up(bd, {m}, d1);
    be.add_bias(y.view(), b.view());
    if (!computes()) continue;
    test::expect_close(down(db), expect_db, d0, 1e-6, "db");
    test::expect_close(down(y), expect_y, d0, 1e-7, "y");
  }
  // 64 rows of 2^-9 into db = 1: 2^-3 in all, but each row alone is under half a bf16 ulp of 1.
  Buffer db = up({1.0}, {1}, DType::BF16), dy = up(Vec(64, std::ldexp(1.0, -9)), {64, 1});
  be.bias_backward(db.view(), dy.view());
  if (!computes()) return;
  EXPECT_EQ(down(db)[0], 1.125);
}

// AdamW with a BF16 param (updated in fp32, rounded once) and/or a BF16 grad; m, v F32.
TEST_P(BackendOps, AdamWBf16ParamAndGrad) {
  const int64_t n = 64;
  const Vec p0 = randb(n), g0 = randb(n), m0 = randb(n, 0.1f);
  Vec v0(n);
  for (int64_t i = 0; i < n; ++i) v0[i] = test::round_bf16(0.01 * static_cast<double>(i + 1));
  const AdamWStep s{
      .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 3};
  Vec pp(n), mm(n), vv(n);
  for (int64_t i = 0; i < n; ++i) {
    pp[i] = p0[i] * (1 - 1e-2 * 0.1);
    mm[i] = 0.9 * m0[i] + 0.1 * g0[i];
    vv[i] = 0.95 * v0[i] + 0.05 * g0[i] * g0[i];
    const double mhat = mm[i] / (1 - std::pow(0.9, 3)), vhat = vv[i] / (1 - std::pow(0.95, 3));
    pp[i] -= 1e-2 * mhat / (std::sqrt(vhat) + 1e-8);
  }
  for (int combo = 0; combo < 4; ++combo) {
    SCOPED_TRACE(test::combo_name(combo, 2));
    const DType dp = test::dtype_combo(combo, 0), dg = test::dtype_combo(combo, 1);
    Buffer p = up(p0, {n}, dp), g = up(g0, {n}, dg), m = up(m0, {n}), v = up(v0, {n});
    be.adamw_step(p.view(), g.view(), m.view(), v.view(), s);
    if (!computes()) continue;
    test::expect_close(down(p), pp, dp, 1e-6, "param");
    test::expect_close(down(m), mm, DType::F32, 1e-6, "m");
    test::expect_close(down(v), vv, DType::F32, 1e-6, "v");
  }
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(test::all_backends()),
                         test::BackendCaseName{});

}  // namespace
}  // namespace sbp
