// The LM-head ops of every backend (backend_suite.h): logsoftmax_target, dlogits_inplace,
// argmax_rows, softmax_entropy and dlogits_entropy_inplace, against float64 references written
// here, the logits gradients against central finite differences of L = sum_i a_i logp_i
// (+ b_i H_i). The gradients are written over the logits (documented: they overwrite, they do
// not accumulate), so there is no accumulation to check. The logits may also be BF16
// (backend_suite.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend_suite.h"
#include "objective/gae.h"
#include "objective/ppo.h"
#include "objective/ppo_rollout.h"
#include "objective/sequence_rows.h"
#include "objective_kernels/objective_kernels.h"

namespace sbp {
namespace {

using test::BackendOps;
using test::dot;
using test::numeric_grad;
using test::rel_err_vec;
using test::Vec;

TEST_P(BackendOps, LogSoftmaxTargetAndLogitsGradient) {
  const int64_t n = 4, V = 37;
  const std::vector<int32_t> tgv = {5, -1, 36, 0};
  Vec ld, wd;
  Buffer logits = rand({n, V}, 4.0f, &ld), tg = ids(tgv), w = rand({n}, 1.0f, &wd);
  Buffer lse = zeros({n}), logp = zeros({n});
  auto ref_logp = [&](const Vec& l) {
    Vec lp(n, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      double mx = -1e300, s = 0;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, l[i * V + j]);
      for (int64_t j = 0; j < V; ++j) s += std::exp(l[i * V + j] - mx);
      const int32_t t = tgv[i];
      lp[i] = t >= 0 ? l[i * V + t] - mx - std::log(s) : 0.0;
    }
    return lp;
  };
  be.logsoftmax_target(lse.view(), logp.view(), logits.view(), tg.view());
  const Vec logp_got = computes() ? down(logp) : Vec();
  // dL/dlogits for L = sum_i w_i logp_i, written over the logits.
  be.dlogits_inplace(logits.view(), lse.view(), tg.view(), w.view());
  if (!computes()) return;
  EXPECT_LT(rel_err_vec(logp_got, ref_logp(ld)), 1e-6);
  EXPECT_EQ(logp_got[1], 0.0f);
  const Vec nd = numeric_grad([&](const Vec& l) { return dot(ref_logp(l), wd); }, ld);
  const Vec got = down(logits);
  EXPECT_LT(rel_err_vec(got, nd), 1e-5);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(got[1 * V + j], 0.0f);  // no target
  // Target ids index the row: only a backend with the data can check them.
  Buffer bad = ids({5, -1, static_cast<int32_t>(V), 0});
  // Reported by the op or, on a GPU, at the next synchronisation (Backend::synchronize).
  EXPECT_THROW(
      {
        be.logsoftmax_target(lse.view(), logp.view(), logits.view(), bad.view());
        be.synchronize();
      },
      ShapeError);
  EXPECT_THROW(
      {
        be.dlogits_inplace(logits.view(), lse.view(), bad.view(), w.view());
        be.synchronize();
      },
      ShapeError);
}

TEST_P(BackendOps, LogSoftmaxIsStableForLargeLogits) {
  const int64_t V = 5;
  Vec l(V);
  for (int64_t j = 0; j < V; ++j) l[j] = 1000.0 + static_cast<double>(j);
  Buffer logits = up(l, {1, V}), tg = ids({2}), lse = zeros({1}), logp = zeros({1});
  be.logsoftmax_target(lse.view(), logp.view(), logits.view(), tg.view());
  if (!computes()) return;
  double s = 0;
  for (int j = 0; j < V; ++j) s += std::exp(j - 4.0);
  EXPECT_NEAR(down(logp)[0], (2.0 - 4.0) - std::log(s), 1e-5);
  EXPECT_NEAR(down(lse)[0], 1004.0 + std::log(s), 1e-3);
}

// A real vocabulary's tail: one logit far above 100,000 others whose exps (4.1e-8 each) are
// below half an ulp of 1. Summed in fp32 lanes, a lane that already holds exp(0) = 1 drops every
// later tail term (the lse came out low by ~1/16 of the tail's mass, 2.6e-4 here; on
// SmolLM2-135M every log-prob was ~1e-5 off); the float64 sum keeps them.
TEST_P(BackendOps, LogSoftmaxKeepsTheVocabularyTail) {
  const int64_t V = 100000;
  Vec l(V, -17.0);
  l[0] = 0.0;
  Buffer logits = up(l, {1, V}), tg = ids({5}), lse = zeros({1}), logp = zeros({1}),
         ent = zeros({1});
  be.logsoftmax_target(lse.view(), logp.view(), logits.view(), tg.view());
  be.softmax_entropy(ent.view(), logits.view(), lse.view());
  if (!computes()) return;
  const double tail = static_cast<double>(V - 1) * std::exp(-17.0);
  const double want_lse = std::log1p(tail);
  EXPECT_NEAR(down(lse)[0], want_lse, 1e-6);
  EXPECT_NEAR(down(logp)[0], -17.0 - want_lse, 1e-6);
  // H = sum_j p_j (lse - z_j)
  const double want_h = (1.0 * want_lse + tail * (want_lse + 17.0)) / (1.0 + tail);
  EXPECT_NEAR(down(ent)[0], want_h, 1e-6);
}

TEST_P(BackendOps, ArgmaxRowsTakesTheFirstOfTies) {
  const int64_t V = 6;
  Buffer logits = up({0,  1,  5,  2,  5,  -1,    // tie: the first 5
                      -3, -2, -1, -4, -5, -6,    // all negative
                      7,  0,  0,  0,  0,  0,     // first column
                      0,  0,  0,  0,  0,  0.5},  // last column
                     {4, V});
  Buffer out = ids({-7, -7, -7, -7});
  be.argmax_rows(out.view(), logits.view());
  if (!computes()) return;
  EXPECT_EQ(down(out), Vec({2, 2, 0, 5}));
}

// ---- entropy (GRPO/PPO entropy bonus) ----

struct Rows {
  int64_t n, V;
  Vec logits;
  std::vector<int32_t> targets;
};

Rows make_rows(int64_t n, int64_t V, uint64_t seed) {
  Rng rng(seed);
  Rows r{n, V, {}, {}};
  for (int64_t i = 0; i < n * V; ++i) r.logits.push_back(static_cast<double>(3.0f * rng.normal()));
  for (int64_t i = 0; i < n; ++i)
    r.targets.push_back(i == 1 ? -1 : static_cast<int32_t>(rng.below(static_cast<uint64_t>(V))));
  return r;
}

// float64: lse, logp of the target, entropy of each row.
void reference(const Rows& r, const Vec& z, Vec* lse, Vec* logp, Vec* H) {
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

TEST_P(BackendOps, EntropyMatchesFloat64) {
  const Rows r = make_rows(5, 301, 1);
  Buffer tl = up(r.logits, {5, 301}), tt = ids(r.targets);
  Buffer tlse = zeros({5}), tlogp = zeros({5}), tH = zeros({5});
  be.logsoftmax_target(tlse.view(), tlogp.view(), tl.view(), tt.view());
  be.softmax_entropy(tH.view(), tl.view(), tlse.view());
  // A one-hot-like row has entropy ~0; a uniform row log V.
  Buffer u = up(Vec(301, 0.5), {1, 301}), ut = ids({3});
  Buffer ul = zeros({1}), ulp = zeros({1}), uH = zeros({1});
  be.logsoftmax_target(ul.view(), ulp.view(), u.view(), ut.view());
  be.softmax_entropy(uH.view(), u.view(), ul.view());
  if (!computes()) return;
  Vec l64, lp64, H64;
  reference(r, r.logits, &l64, &lp64, &H64);
  const Vec H = down(tH);
  for (size_t i = 0; i < 5; ++i) EXPECT_NEAR(H[i], H64[i], 1e-5 * H64[i] + 1e-6);
  EXPECT_NEAR(down(uH)[0], std::log(301.0), 1e-5);
}

TEST_P(BackendOps, EntropyGradientMatchesFiniteDifferences) {
  const int64_t n = 4, V = 37;
  const Rows r = make_rows(n, V, 2);
  const Vec a = {0.7f, -0.4f, 1.3f, -2.0f};  // dL/dlogp (row 1 has no target)
  const Vec b = {0.5f, 1.5f, -0.8f, 0.25f};  // dL/dH
  Buffer tl = up(r.logits, {n, V}), tt = ids(r.targets);
  Buffer tlse = zeros({n}), tlogp = zeros({n}), tH = zeros({n});
  Buffer av = up(a, {n}), bv = up(b, {n});
  be.logsoftmax_target(tlse.view(), tlogp.view(), tl.view(), tt.view());
  be.softmax_entropy(tH.view(), tl.view(), tlse.view());
  be.dlogits_entropy_inplace(tl.view(), tlse.view(), tt.view(), av.view(), tH.view(), bv.view());
  // With dL/dH = 0 the kernel equals the plain dlogits kernel bit for bit.
  Buffer g1 = up(r.logits, {n, V}), g2 = up(r.logits, {n, V}), zero = zeros({n});
  be.dlogits_entropy_inplace(g1.view(), tlse.view(), tt.view(), av.view(), tH.view(), zero.view());
  be.dlogits_inplace(g2.view(), tlse.view(), tt.view(), av.view());
  if (!computes()) return;
  EXPECT_EQ(down(g1), down(g2));
  // L(z) in float64.
  auto loss = [&](const Vec& z) {
    Vec l64, lp64, H64;
    reference(r, z, &l64, &lp64, &H64);
    double L = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      L += (r.targets[i] >= 0 ? a[i] * lp64[i] : 0.0) + b[i] * H64[i];
    return L;
  };
  const Vec g = down(tl);
  double gmax = 0;
  for (double v : g) gmax = std::max(gmax, std::fabs(v));
  const Vec fd = numeric_grad(loss, r.logits);
  for (size_t k = 0; k < g.size(); ++k)
    EXPECT_NEAR(g[k], fd[k], 1e-5 * gmax + 1e-6) << "logit " << k;
  // Target ids index the row: only a backend with the data can check them.
  Buffer bad = ids({0, -1, static_cast<int32_t>(V), 0});
  EXPECT_THROW(
      {
        be.dlogits_entropy_inplace(g1.view(), tlse.view(), bad.view(), av.view(), tH.view(),
                                   bv.view());
        be.synchronize();
      },
      ShapeError);
}

// ---- BF16 logits (a bf16 step's LM-head block) ----

// logsoftmax_target, softmax_entropy and argmax_rows read BF16 logits (lse, logp, entropy stay
// F32 and fp32-accurate on the rounded logits); dlogits_inplace and dlogits_entropy_inplace
// write the gradient over them, rounded once per element (the target's included).
TEST_P(BackendOps, LmHeadOpsOnBf16Logits) {
  const int64_t n = 4, V = 37;
  const Rows r0 = make_rows(n, V, 3);
  const Vec z = test::round_bf16(r0.logits);
  Rows r = r0;
  r.logits = z;
  const Vec a = {0.7f, -0.4f, 1.3f, -2.0f};  // dL/dlogp (row 1 has no target)
  const Vec b = {0.5f, 1.5f, -0.8f, 0.25f};  // dL/dH
  Buffer tl = up(z, {n, V}, DType::BF16), tt = ids(r.targets);
  Buffer tlse = zeros({n}), tlogp = zeros({n}), tH = zeros({n}), am = ids({-7, -7, -7, -7});
  Buffer av = up(a, {n}), bv = up(b, {n}), zero = zeros({n});
  be.logsoftmax_target(tlse.view(), tlogp.view(), tl.view(), tt.view());
  be.softmax_entropy(tH.view(), tl.view(), tlse.view());
  be.argmax_rows(am.view(), tl.view());
  Buffer g1 = up(z, {n, V}, DType::BF16), g2 = up(z, {n, V}, DType::BF16);
  be.dlogits_inplace(g1.view(), tlse.view(), tt.view(), av.view());
  be.dlogits_entropy_inplace(g2.view(), tlse.view(), tt.view(), av.view(), tH.view(), bv.view());
  // With dL/dH = 0 the entropy kernel equals the plain one bit for bit, in BF16 too.
  Buffer g3 = up(z, {n, V}, DType::BF16);
  be.dlogits_entropy_inplace(g3.view(), tlse.view(), tt.view(), av.view(), tH.view(), zero.view());
  if (!computes()) return;
  Vec l64, lp64, H64;
  reference(r, z, &l64, &lp64, &H64);
  test::expect_close(down(tlse), l64, DType::F32, 1e-6, "lse");
  test::expect_close(down(tlogp), lp64, DType::F32, 1e-5, "logp");
  test::expect_close(down(tH), H64, DType::F32, 1e-5, "entropy");
  Vec expect_am(n);
  for (int64_t i = 0; i < n; ++i)
    expect_am[i] = static_cast<double>(
        std::max_element(z.begin() + i * V, z.begin() + (i + 1) * V) - (z.begin() + i * V));
  EXPECT_EQ(down(am), expect_am);
  auto loss = [&](const Vec& zz, bool entropy) {
    Vec l, lp, H;
    reference(r, zz, &l, &lp, &H);
    double L = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      L += (r.targets[i] >= 0 ? a[i] * lp[i] : 0.0) + (entropy ? b[i] * H[i] : 0.0);
    return L;
  };
  const Vec fd1 = numeric_grad([&](const Vec& zz) { return loss(zz, false); }, z);
  const Vec fd2 = numeric_grad([&](const Vec& zz) { return loss(zz, true); }, z);
  test::expect_close(down(g1), fd1, DType::BF16, 1e-5, "dlogits");
  test::expect_close(down(g2), fd2, DType::BF16, 1e-5, "dlogits with entropy");
  EXPECT_EQ(down(g3), down(g1));
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(down(g1)[1 * V + j], 0.0);  // no target
}

// The policy-gradient objectives' per-token gradients against central differences (float64)
// of the per-token loss w (-min(r A, clip(r) A) + beta k3) written here, in each regime of the
// clip (inside, below and above the range, for both signs of A; none at a kink), with a masked
// row (w = 0), the entropy coefficient's constant, and on policy (r = 1) without dentropy.
TEST_P(BackendOps, PolicyTokenGradsMatchTheirLossInFloat64) {
  const PolicyTerms terms{.eps_low = 0.2, .eps_high = 0.28, .beta = 0.04, .entropy_coef = 0.01};
  //          lp     old    ref    A     w
  const Vec table = {-1.0, -1.05, -0.9, 1.3,  0.5,    // inside
                     -1.0, -0.5,  -1.2, 1.3,  0.25,   // r = 0.61 < lo, A > 0: unclipped smaller
                     -1.0, -0.5,  -1.2, -0.7, 0.25,   // r < lo, A < 0: clipped
                     -0.2, -1.0,  -0.4, 1.3,  0.125,  // r = 2.2 > hi, A > 0: clipped
                     -0.2, -1.0,  -0.4, -0.7, 0.125,  // r > hi, A < 0: unclipped smaller
                     -3.0, -2.0,  -2.5, 0.9,  0.0};   // masked
  const int64_t n = 6;
  Vec lp(n), rows(static_cast<size_t>(n * kPolicyRowWidth));
  for (int64_t i = 0; i < n; ++i) {
    lp[i] = table[i * 5];
    for (int c = 0; c < 4; ++c) rows[i * 4 + c] = table[i * 5 + 1 + c];
  }
  Buffer logp = up(lp, {n}), r = up(rows, {n, 4}), dlogp = zeros({n}), dent = zeros({n});
  policy_token_grads(be, dlogp.view(), dent.view(), logp.view(), r.view(), terms);
  if (!computes()) return;
  auto loss = [&](const Vec& x, int64_t i, bool on_policy) {
    const double old = on_policy ? lp[i] : rows[i * 4], ref = rows[i * 4 + 1];
    const double A = rows[i * 4 + 2];
    const double ratio = std::exp(x[0] - old);
    const double c = std::clamp(ratio, 1.0 - terms.eps_low, 1.0 + terms.eps_high);
    const double k3 = std::exp(ref - x[0]) - (ref - x[0]) - 1.0;
    return rows[i * 4 + 3] * (-std::min(ratio * A, c * A) + terms.beta * k3);
  };
  const Vec got = down(dlogp), got_ent = down(dent);
  for (int64_t i = 0; i < n; ++i) {
    const double expect = numeric_grad([&](const Vec& x) { return loss(x, i, false); }, {lp[i]})[0];
    EXPECT_NEAR(got[i], expect, 1e-6 * std::max(1e-3, std::fabs(expect))) << "row " << i;
    EXPECT_EQ(got_ent[i], static_cast<float>(-terms.entropy_coef * rows[i * 4 + 3])) << i;
  }
  EXPECT_EQ(got[5], 0.0f);  // masked: no gradient, no entropy term
  EXPECT_EQ(got_ent[5], 0.0f);
  // The reference's log-probs from a vector of their own (a reference whose forward left them on
  // the device): the rows' column, set to nonsense, is not read; the same bits.
  Vec rows_without = rows, refs(n);
  for (int64_t i = 0; i < n; ++i) {
    refs[i] = rows[i * 4 + 1];
    rows_without[i * 4 + 1] = 99.0;
  }
  Buffer r_without = up(rows_without, {n, 4}), ref = up(refs, {n}), dlogp_ref = zeros({n});
  policy_token_grads(be, dlogp_ref.view(), Tensor(), logp.view(), r_without.view(), terms,
                     ref.view());
  EXPECT_EQ(down(dlogp_ref), got);

  PolicyTerms on = terms;  // r = 1: the old log-probs are the current ones
  on.on_policy = true;
  on.beta = 0.0;
  policy_token_grads(be, dlogp.view(), Tensor(), logp.view(), r.view(), on);
  const Vec got_on = down(dlogp);
  for (int64_t i = 0; i < n; ++i)  // -w A, the old log-probs unread
    EXPECT_NEAR(got_on[i], -rows[i * 4 + 3] * rows[i * 4 + 2], 1e-7) << "row " << i;
}

// Misuse: rows not (n, 4), a dentropy or ref of another length, a non-finite scalar.
TEST_P(BackendOps, PolicyTokenGradsRejectMisuse) {
  Buffer logp = zeros({3}), dlogp = zeros({3}), r = zeros({3, 4}), bad_rows = zeros({3, 3});
  Buffer short_ent = zeros({2});
  const PolicyTerms terms;
  EXPECT_THROW(policy_token_grads(be, dlogp.view(), Tensor(), logp.view(), bad_rows.view(), terms),
               ShapeError);
  EXPECT_THROW(policy_token_grads(be, dlogp.view(), short_ent.view(), logp.view(), r.view(), terms),
               ShapeError);
  Buffer short_ref = zeros({2});
  EXPECT_THROW(policy_token_grads(be, dlogp.view(), Tensor(), logp.view(), r.view(), terms,
                                  short_ref.view()),
               ShapeError);
  PolicyTerms nan = terms;
  nan.beta = std::nan("");
  EXPECT_THROW(policy_token_grads(be, dlogp.view(), Tensor(), logp.view(), r.view(), nan),
               ShapeError);
}

// PPO's value-head gradients against central differences (float64) of w max((v - R)^2,
// (clip(v, v_old +- eps) - R)^2), in each regime (inside the range; outside it with either
// branch the larger; none at a kink), with a masked row.
TEST_P(BackendOps, ValueTokenGradsMatchTheirLossInFloat64) {
  const ValueTerms terms{.clip = 0.2};
  //               v     v_old  R     w
  const Vec table = {0.5,  0.45, 1.0, 0.5,    // inside
                     1.0,  0.5,  2.0, 0.25,   // above, clipped farther from R: clipped branch
                     1.0,  0.5,  0.0, 0.25,   // above, v farther from R: unclipped branch
                     -0.5, 0.0,  1.0, 0.125,  // below, v farther from R
                     0.3,  0.1,  0.2, 0.0};   // masked
  const int64_t n = 5;
  Vec v(n), rows(static_cast<size_t>(n * kValueRowWidth));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = table[i * 4];
    for (int c = 0; c < 3; ++c) rows[i * 3 + c] = table[i * 4 + 1 + c];
  }
  Buffer value = up(v, {n}), r = up(rows, {n, 3}), dvalue = zeros({n});
  value_token_grads(be, dvalue.view(), value.view(), r.view(), terms);
  if (!computes()) return;
  auto loss = [&](const Vec& x, int64_t i) {
    const double vold = rows[i * 3], ret = rows[i * 3 + 1], w = rows[i * 3 + 2];
    const double vc = std::clamp(x[0], vold - terms.clip, vold + terms.clip);
    return w * std::max((x[0] - ret) * (x[0] - ret), (vc - ret) * (vc - ret));
  };
  const Vec got = down(dvalue);
  for (int64_t i = 0; i < n; ++i) {
    const double expect = numeric_grad([&](const Vec& x) { return loss(x, i); }, {v[i]})[0];
    EXPECT_NEAR(got[i], expect, 1e-6 * std::max(1e-3, std::fabs(expect))) << "row " << i;
  }
  EXPECT_EQ(got[4], 0.0f);
  Buffer bad_rows = zeros({n, 4});
  EXPECT_THROW(value_token_grads(be, dvalue.view(), value.view(), bad_rows.view(), terms),
               ShapeError);
  EXPECT_THROW(value_token_grads(be, dvalue.view(), value.view(), r.view(), ValueTerms{.clip = -1}),
               ShapeError);
}

// The sequence-level objectives' gradients (DPO in its three losses, ORPO, KTO) for every row of a
// small batch of four sequences, against central differences (float64) of their losses written
// here from the papers' / TRL's definitions: sums over each sequence's completion rows, the pair
// or sequence formula, the mean over the step's units. Rows with weight 0 (prompts, each
// sequence's last row) get no gradient but ORPO's NLL on the chosen sequences.
TEST_P(BackendOps, SequenceTokenGradsMatchTheirLossInFloat64) {
  //                      seq 0 (chosen)      seq 1 (rejected)  seq 2 (chosen)      seq 3
  const std::vector<int32_t> begin = {0, 4, 7, 11, 14};
  const Vec w = {0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0};
  const Vec lp = {-0.75, -1.5, -0.25, 0, -2.0, -0.5, 0, -1.25, -0.375, -0.625, 0, -1.0, -2.5, 0};
  const Vec rf = {-0.5, -1.25, -0.5, 0, -1.5, -1.0, 0, -1.0, -0.5, -0.75, 0, -0.75, -2.0, 0};
  const std::vector<float> labels = {1.0f, 0.0f, 0.0f, 1.0f};
  const int64_t T = 14, S = 4;
  const double units = 3.0, nll_rows = 9.0;  // the step's, beyond this batch
  Buffer logp = up(lp, {T}), ref = up(rf, {T}), weight = up(w, {T}), offsets = ids(begin);
  Buffer label = up(Vec(labels.begin(), labels.end()), {S}), dlogp = zeros({T});
  auto sums = [&](const Vec& x, const Vec& y, int64_t s) {  // (sum m logp, sum m ref, sum m)
    double a = 0, b = 0, n = 0;
    for (int32_t t = begin[s]; t < begin[s + 1]; ++t) {
      a += w[t] * x[t];
      b += w[t] * y[t];
      n += w[t];
    }
    return std::array<double, 3>{a, b, n};
  };
  auto log_sig = [](double x) { return -std::log1p(std::exp(-x)); };
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  struct Case {
    const char* name;
    SequenceTerms terms;
    std::function<double(const Vec&)> loss;
  };
  std::vector<Case> cases;
  for (DpoLoss type : {DpoLoss::sigmoid, DpoLoss::hinge, DpoLoss::ipo}) {
    SequenceTerms t{.formula = SequenceFormula::dpo,
                    .dpo_loss = type,
                    .beta = 0.5,
                    .label_smoothing = type == DpoLoss::sigmoid ? 0.1 : 0.0,
                    .units_in_step = units};
    const char* name = type == DpoLoss::sigmoid ? "dpo sigmoid"
                       : type == DpoLoss::hinge ? "dpo hinge"
                                                : "dpo ipo";
    cases.push_back({name, t, [&, t](const Vec& x) {
                       double L = 0;
                       for (int64_t p = 0; p < S / 2; ++p) {
                         const auto c = sums(x, rf, 2 * p), r = sums(x, rf, 2 * p + 1);
                         const bool avg = t.dpo_loss == DpoLoss::ipo;
                         const double nc = avg ? c[2] : 1, nr = avg ? r[2] : 1;
                         const double z = (c[0] / nc - r[0] / nr) - (c[1] / nc - r[1] / nr);
                         const double bz = t.beta * z;
                         if (t.dpo_loss == DpoLoss::sigmoid)
                           L += -(1 - t.label_smoothing) * log_sig(bz) -
                                t.label_smoothing * log_sig(-bz);
                         if (t.dpo_loss == DpoLoss::hinge) L += std::max(0.0, 1 - bz);
                         if (t.dpo_loss == DpoLoss::ipo)
                           L += (z - 1 / (2 * t.beta)) * (z - 1 / (2 * t.beta));
                       }
                       return L / units;
                     }});
  }
  const SequenceTerms orpo{.formula = SequenceFormula::orpo,
                           .beta = 0.25,
                           .units_in_step = units,
                           .nll_rows_in_step = nll_rows};
  cases.push_back({"orpo", orpo, [&](const Vec& x) {
                     double nll = 0, odds = 0;
                     for (int64_t p = 0; p < S / 2; ++p) {
                       for (int32_t t = begin[2 * p]; t + 1 < begin[2 * p + 1]; ++t) nll -= x[t];
                       const auto c = sums(x, rf, 2 * p), r = sums(x, rf, 2 * p + 1);
                       const double ac = c[0] / c[2], ar = r[0] / r[2];
                       const double z = std::log(std::exp(ac) / (1 - std::exp(ac))) -
                                        std::log(std::exp(ar) / (1 - std::exp(ar)));
                       odds += log_sig(z);
                     }
                     return nll / nll_rows - orpo.beta * odds / units;
                   }});
  const SequenceTerms simpo{.formula = SequenceFormula::simpo,
                            .beta = 2.0,
                            .label_smoothing = 0.1,
                            .units_in_step = units,
                            .nll_rows_in_step = nll_rows,
                            .gamma = 1.0,
                            .cpo_alpha = 0.5};
  cases.push_back({"simpo", simpo, [&](const Vec& x) {
                     double L = 0, nll = 0;
                     for (int64_t p = 0; p < S / 2; ++p) {
                       const auto c = sums(x, rf, 2 * p), r = sums(x, rf, 2 * p + 1);
                       const double z = c[0] / c[2] - r[0] / r[2] - simpo.gamma / simpo.beta;
                       L += -(1 - simpo.label_smoothing) * log_sig(simpo.beta * z) -
                            simpo.label_smoothing * log_sig(-simpo.beta * z);
                       nll -= c[0];
                     }
                     return L / units + simpo.cpo_alpha * nll / nll_rows;
                   }});
  const SequenceTerms kto{.formula = SequenceFormula::kto,
                          .beta = 0.5,
                          .units_in_step = units,
                          .kl = 0.125,
                          .desirable_weight = 1.0,
                          .undesirable_weight = 1.5};
  cases.push_back({"kto", kto, [&](const Vec& x) {
                     double L = 0;
                     for (int64_t s = 0; s < S; ++s) {
                       const auto q = sums(x, rf, s);
                       const double ratio = q[0] - q[1];
                       const bool good = labels[s] == 1.0f;
                       const double arg =
                           good ? kto.beta * (ratio - kto.kl) : kto.beta * (kto.kl - ratio);
                       L += (good ? kto.desirable_weight : kto.undesirable_weight) * (1 - sig(arg));
                     }
                     return L / units;
                   }});
  for (const Case& c : cases) {
    const bool kto_case = c.terms.formula == SequenceFormula::kto;
    sequence_token_grads(be, dlogp.view(), logp.view(),
                         reads_reference(c.terms) ? ref.view() : Tensor(), weight.view(),
                         offsets.view(), kto_case ? label.view() : Tensor(), c.terms);
    if (!computes()) continue;
    const Vec got = down(dlogp), expect = numeric_grad(c.loss, lp);
    for (int64_t t = 0; t < T; ++t)
      EXPECT_NEAR(got[t], expect[t], 1e-6 * std::max(1e-3, std::fabs(expect[t])))
          << c.name << " row " << t;
  }
}

// Misuse: a reference where the formula has none (and none where it has one), KTO without
// labels, offsets that do not make whole units; where the host reads the offsets, ones that do
// not run from 0 to T in order.
TEST_P(BackendOps, SequenceTokenGradsRejectMisuse) {
  Buffer logp = zeros({6}), dlogp = zeros({6}), ref = zeros({6}), w = zeros({6});
  Buffer pairs = ids({0, 3, 6}), odd = ids({0, 2, 4, 6}), label = zeros({2});
  const SequenceTerms dpo{.formula = SequenceFormula::dpo};
  const SequenceTerms orpo{.formula = SequenceFormula::orpo};
  const SequenceTerms kto{.formula = SequenceFormula::kto};
  auto run = [&](const Tensor& r, const Tensor& b, const Tensor& l, const SequenceTerms& t) {
    sequence_token_grads(be, dlogp.view(), logp.view(), r, w.view(), b, l, t);
  };
  EXPECT_NO_THROW(run(ref.view(), pairs.view(), Tensor(), dpo));
  EXPECT_THROW(run(Tensor(), pairs.view(), Tensor(), dpo), ShapeError);
  EXPECT_THROW(run(ref.view(), pairs.view(), Tensor(), orpo), ShapeError);
  EXPECT_THROW(run(ref.view(), odd.view(), Tensor(), dpo), ShapeError);  // 3 sequences
  EXPECT_THROW(run(ref.view(), pairs.view(), Tensor(), kto), ShapeError);
  EXPECT_NO_THROW(run(ref.view(), pairs.view(), label.view(), kto));
  SequenceTerms zero = dpo;
  zero.units_in_step = 0.0;
  EXPECT_THROW(run(ref.view(), pairs.view(), Tensor(), zero), ShapeError);
  if (!computes() || GetParam().name == "cuda") return;  // a GPU clamps instead of reading them
  Buffer short_end = ids({0, 3, 5}), backwards = ids({0, 4, 3, 5, 6});
  EXPECT_THROW(run(ref.view(), short_end.view(), Tensor(), dpo), ShapeError);
  EXPECT_THROW(run(ref.view(), backwards.view(), Tensor(), dpo), ShapeError);
}

// KTO's KL estimate on the device: each micro-batch's part (the double in its two F32) equals
// the sum of m_t (logp_t - ref_t) over its rows in float64, summed here in another order; the
// formula fed those parts gives the bits of the formula given their estimate on the host
// (kto_kl_estimate), for a positive estimate and for one clamped at 0.
TEST_P(BackendOps, KtoKlPartsMatchFloat64AndFeedTheFormula) {
  const int64_t T = 13;
  const std::vector<int32_t> begin_a = {0, 4, 9, 13}, begin_b = {0, 6, 13};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec rf(T), lp_up(T), lp_down(T), w(T);
  for (int64_t t = 0; t < T; ++t) {
    rf[t] = -2.0f + u(rng);
    // the policy above the reference (KL > 0), then below it; floats, as the tensors hold them
    lp_up[t] = static_cast<float>(rf[t] + 0.3 + 0.2 * u(rng));
    lp_down[t] = static_cast<float>(rf[t] - 0.3 + 0.2 * u(rng));
    w[t] = t % 5 == 0 ? 0.0f : 1.0f;
  }
  const Vec labels = {1.0f, 0.0f, 1.0f};
  Buffer ref = up(rf, {T}), weight = up(w, {T}), label = up(labels, {3});
  Buffer ba = ids(begin_a), bb = ids(begin_b);
  auto expected_part = [&](const Vec& lp) {  // rows from the last to the first
    double sum = 0.0;
    for (int64_t t = T - 1; t >= 0; --t) sum += static_cast<double>(w[t]) * (lp[t] - rf[t]);
    return sum;
  };
  const SequenceTerms kto{.formula = SequenceFormula::kto,
                          .beta = 0.5,
                          .units_in_step = 5.0,
                          .kl_sequences = 5.0,  // 3 + 2 sequences in the two parts
                          .desirable_weight = 1.0,
                          .undesirable_weight = 1.5};
  for (const Vec* lp : {&lp_up, &lp_down}) {
    Buffer logp = up(*lp, {T}), parts = zeros({4}), dlogp = zeros({T}), host_dlogp = zeros({T});
    kto_kl_part(be, parts.view().slice_rows(0, 2), logp.view(), ref.view(), weight.view(),
                ba.view());
    kto_kl_part(be, parts.view().slice_rows(2, 4), logp.view(), ref.view(), weight.view(),
                bb.view());
    sequence_token_grads(be, dlogp.view(), logp.view(), ref.view(), weight.view(), ba.view(),
                         label.view(), kto, parts.view());
    if (!computes()) continue;
    const std::vector<float> raw = download_f32(parts.view());  // the doubles' bytes
    double got[2];
    std::memcpy(got, raw.data(), sizeof got);
    const double expect = expected_part(*lp);
    for (double g : got) EXPECT_NEAR(g, expect, 1e-12 * std::fabs(expect));
    const double kl = kto_kl_estimate(got, 2, kto.kl_sequences);
    EXPECT_EQ(kl, lp == &lp_up ? (got[0] + got[1]) / 5.0 : 0.0);
    SequenceTerms on_host = kto;
    on_host.kl = kl;
    sequence_token_grads(be, host_dlogp.view(), logp.view(), ref.view(), weight.view(), ba.view(),
                         label.view(), on_host);
    const Vec a = down(dlogp), b = down(host_dlogp);
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(a[t], b[t]) << "row " << t;
  }
}

// Misuse of the KL parts: not one double for a part, an odd count or a misaligned slice, parts
// for a formula other than KTO's.
TEST_P(BackendOps, KtoKlPartsRejectMisuse) {
  Buffer logp = zeros({6}), dlogp = zeros({6}), ref = zeros({6}), w = zeros({6});
  Buffer pairs = ids({0, 3, 6}), label = zeros({2}), parts = zeros({4});
  const SequenceTerms kto{.formula = SequenceFormula::kto, .kl_sequences = 2.0};
  const SequenceTerms dpo{.formula = SequenceFormula::dpo};
  auto part = [&](const Tensor& p) {
    kto_kl_part(be, p, logp.view(), ref.view(), w.view(), pairs.view());
  };
  auto grads = [&](const Tensor& l, const SequenceTerms& t, const Tensor& p) {
    sequence_token_grads(be, dlogp.view(), logp.view(), ref.view(), w.view(), pairs.view(), l, t,
                         p);
  };
  EXPECT_NO_THROW(part(parts.view().slice_rows(0, 2)));
  EXPECT_THROW(part(parts.view()), ShapeError);  // two doubles for one
  EXPECT_NO_THROW(grads(label.view(), kto, parts.view()));
  EXPECT_THROW(grads(label.view(), kto, parts.view().slice_rows(0, 3)), ShapeError);
  EXPECT_THROW(grads(Tensor(), dpo, parts.view()), ShapeError);
  if (!computes()) return;  // shape-only tensors have no address to misalign
  EXPECT_THROW(part(parts.view().slice_rows(1, 3)), ShapeError);
}

// PPO's rollout rows (objective_kernels.h's ppo_rollout_rows, objective/ppo_rollout.h) against the
// host's own computation of the same quantities (objective/gae.h ppo_step_advantages, which the TRL
// fixtures check): a step of two micro-batches (their rows one after another on the device, two
// parts on the host), prompt rows between completions, both KL estimators, with and without the
// rewards' whitening. The sums run in different orders, so the two agree to the double
// computations' rounding before each is rounded to float.
TEST_P(BackendOps, PpoRolloutRowsMatchTheHostRollout) {
  // Two micro-batches: 3 sequences of 5, 4, 6 rows, then 2 of 7, 3 rows.
  const std::vector<std::vector<int64_t>> lens = {{5, 4, 6}, {7, 3}};
  std::vector<Batch> batches;
  std::vector<float> logp, ref, values, weight, scores;
  std::vector<int32_t> begin = {0};
  const PpoConfig loss{.vf_coef = 0.3, .grad_accum_steps = 2};
  std::vector<float> seq;  // (S, 3)
  for (const std::vector<int64_t>& ls : lens) {
    Batch b;
    for (int64_t len : ls) {
      b.seq_lens.push_back(len);
      for (int64_t k = 0; k < len; ++k) {
        b.tokens.push_back(static_cast<int32_t>(1 + k));
        b.loss_mask.push_back(k >= 2 ? 1.0f : 0.0f);  // two prompt tokens, then the completion
      }
    }
    const SequenceRows rows(b);
    double n = 0;  // completion rows of the micro-batch
    for (float x : rows.weight) n += x > 0.0f ? 1 : 0;
    for (size_t t = 0; t < rows.weight.size(); ++t) {
      weight.push_back(rows.weight[t]);
      ref.push_back(static_cast<float>(-1.0 - 0.5 * std::fabs(rng.normal())));
      logp.push_back(static_cast<float>(ref.back() + 0.3 * rng.normal()));
      values.push_back(static_cast<float>(0.5 * rng.normal()));
    }
    for (size_t s = 0; s < ls.size(); ++s) {
      begin.push_back(begin.back() + static_cast<int32_t>(ls[s]));
      scores.push_back(static_cast<float>(rng.normal()));
      seq.insert(seq.end(), {scores.back(), ppo_policy_weight(n, loss), ppo_value_weight(n, loss)});
    }
    batches.push_back(std::move(b));
  }
  const int64_t T = static_cast<int64_t>(logp.size()), S = static_cast<int64_t>(scores.size());
  ASSERT_EQ(begin.back(), T);
  auto vec = [](const std::vector<float>& v) { return Vec(v.begin(), v.end()); };
  Buffer lp = up(vec(logp), {T}), rf = up(vec(ref), {T}), val = up(vec(values), {T});
  Buffer w = up(vec(weight), {T}), starts = ids(begin), sq = up(vec(seq), {S, 3});
  for (const KlEstimator est : {KlEstimator::k1, KlEstimator::k3}) {
    for (const bool whiten : {false, true}) {
      const PpoRolloutConfig cfg{
          .kl_coef = 0.1, .kl_estimator = est, .gamma = 0.97, .lam = 0.9, .whiten_rewards = whiten};
      Buffer policy = zeros({T, 4}), value = zeros({T, 3}), moments = zeros({16 * S});
      ppo_rollout_rows(be, policy.view(), value.view(), moments.view(), lp.view(), rf.view(),
                       val.view(), w.view(), starts.view(), sq.view(), cfg);
      if (!computes()) continue;
      const Vec p = down(policy), v = down(value);
      std::vector<PpoRolloutPart> parts;
      int64_t at = 0, s0 = 0;
      for (const Batch& b : batches) {
        const int64_t n = b.size(), ns = static_cast<int64_t>(b.seq_lens.size());
        auto span = [&](const std::vector<float>& x, int64_t from, int64_t count) {
          return std::span<const float>(x.data() + from, static_cast<size_t>(count));
        };
        parts.push_back(
            {&b, span(scores, s0, ns), span(logp, at, n), span(ref, at, n), span(values, at, n)});
        at += n, s0 += ns;
      }
      const std::vector<PpoAdvantages> host = ppo_step_advantages(parts, cfg);
      at = 0;
      int64_t part = 0;
      for (const PpoAdvantages& h : host) {
        for (int64_t t = 0; t < static_cast<int64_t>(h.advantages.size()); ++t) {
          const size_t i = static_cast<size_t>(t), g = static_cast<size_t>(at + t);
          const bool step = weight[g] > 0.0f;
          SCOPED_TRACE("k3 " + std::to_string(est == KlEstimator::k3) + " whiten " +
                       std::to_string(whiten) + " part " + std::to_string(part) + " row " +
                       std::to_string(t));
          EXPECT_EQ(p[4 * g + kOldLogp], logp[g]);
          EXPECT_EQ(p[4 * g + kRefLogp], 0.0);
          EXPECT_NEAR(p[4 * g + kAdvantage], h.advantages[i],
                      2e-6 * std::max(1.0f, std::fabs(h.advantages[i])));
          EXPECT_EQ(v[3 * g + kOldValue], values[g]);
          EXPECT_NEAR(v[3 * g + kReturn], h.returns[i],
                      2e-6 * std::max(1.0f, std::fabs(h.returns[i])));
          if (!step) {
            EXPECT_EQ(p[4 * g + kAdvantage], 0.0);
            EXPECT_EQ(v[3 * g + kReturn], 0.0);
          }
        }
        at += static_cast<int64_t>(h.advantages.size()), ++part;
      }
      // Loss weights: each micro-batch's, on its completion rows only.
      for (int64_t t = 0, s = 0; t < T; ++t) {
        while (begin[static_cast<size_t>(s) + 1] <= t) ++s;
        const size_t g = static_cast<size_t>(t);
        const bool step = weight[g] > 0.0f;
        EXPECT_EQ(p[4 * g + kLossWeight], step ? seq[3 * static_cast<size_t>(s) + 1] : 0.0f);
        EXPECT_EQ(v[3 * g + kValueWeight], step ? seq[3 * static_cast<size_t>(s) + 2] : 0.0f);
      }
    }
  }
}

TEST_P(BackendOps, PpoRolloutRowsRejectMisuse) {
  const int64_t T = 6;
  Buffer v6 = zeros({T}), policy = zeros({T, 4}), value = zeros({T, 3}), moments = zeros({32});
  Buffer two = ids({0, 3, 6}), sq = zeros({2, 3});
  Buffer w = up(Vec{0, 1, 1, 0, 1, 0}, {T});
  const PpoRolloutConfig cfg;
  auto call = [&](const Tensor& p, const Tensor& v, const Tensor& m, const Tensor& weight,
                  const Tensor& begin, const Tensor& seq, const PpoRolloutConfig& c) {
    ppo_rollout_rows(be, p, v, m, v6.view(), v6.view(), v6.view(), weight, begin, seq, c);
  };
  const Tensor P = policy.view(), V = value.view(), M = moments.view(), W = w.view();
  EXPECT_NO_THROW(call(P, V, M, W, two.view(), sq.view(), cfg));
  EXPECT_THROW(call(V, P, M, W, two.view(), sq.view(), cfg), ShapeError);  // rows swapped
  EXPECT_THROW(call(P, V, M.slice_rows(0, 16), W, two.view(), sq.view(), cfg), ShapeError);
  EXPECT_THROW(call(P, V, M, W, two.view(), sq.view().slice_rows(0, 1), cfg), ShapeError);
  Buffer none = ids({0});
  EXPECT_THROW(call(P, V, M, W, none.view(), sq.view(), cfg), ShapeError);  // S = 0
  PpoRolloutConfig bad = cfg;
  bad.gamma = 1.5;
  EXPECT_THROW(call(P, V, M, W, two.view(), sq.view(), bad), ShapeError);
  bad = cfg;
  bad.kl_coef = NAN;
  EXPECT_THROW(call(P, V, M, W, two.view(), sq.view(), bad), ShapeError);
  if (!computes() || GetParam().name == std::string("cuda")) return;  // a GPU trusts the caller
  Buffer no_step = up(Vec{0, 0, 0, 0, 1, 1}, {T});  // sequence 0 has no completion row
  EXPECT_THROW(call(P, V, M, no_step.view(), two.view(), sq.view(), cfg), ShapeError);
  Buffer one = up(Vec{0, 1, 0, 0, 0, 0}, {T});  // ... and one row cannot be whitened
  Buffer whole = ids({0, 6});
  EXPECT_THROW(
      call(P, V, M.slice_rows(0, 16), one.view(), whole.view(), sq.view().slice_rows(0, 1), cfg),
      ShapeError);
  Buffer falling = ids({0, 4, 3});
  EXPECT_THROW(call(P, V, M, W, falling.view(), sq.view(), cfg), ShapeError);
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(test::all_backends()),
                         test::BackendCaseName{});

}  // namespace
}  // namespace sbp
