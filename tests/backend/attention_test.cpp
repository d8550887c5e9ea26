// CPU attention kernels against a float64 reference that materialises the scores, and with BF16
// operands against the F32 kernel's bits.
#include "backend/cpu/attention.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/vec_math.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using test::rel_err;

constexpr double kTol = 1e-5;  // fp32 kernel vs fp64 reference, max|a-b| / max|b|

// One problem: packed stream of T rows split into segments; queries [q_offset, q_offset + n)
// against keys [0, tk).
struct Case {
  std::string name;
  int64_t H, G, h;
  std::vector<int64_t> segments;  // lengths, summing to T
  int64_t q_offset = 0;
  int64_t n = -1;      // -1: T - q_offset
  int64_t tk = -1;     // -1: T
  int64_t window = 0;  // sliding window; 0: none
};

std::string describe(const Case& c) {
  std::string s = c.name + " H=" + std::to_string(c.H) + " G=" + std::to_string(c.G) +
                  " h=" + std::to_string(c.h) + " segs=";
  for (int64_t l : c.segments) s += std::to_string(l) + ",";
  return s + " q_offset=" + std::to_string(c.q_offset) + " window=" + std::to_string(c.window);
}

// Owns the data of one problem; tensors are views into it.
struct Problem {
  int64_t H, G, h, T, q_offset, n, tk, window;
  float scale;
  std::vector<int32_t> seg;             // (T) segment start per global row
  std::vector<float> q, k, v, dout, w;  // q, dout (n, H*h); k, v (tk, G*h); w (n, H*h)

  explicit Problem(const Case& c, uint64_t seed = 1)
      : H(c.H),
        G(c.G),
        h(c.h),
        T(std::accumulate(c.segments.begin(), c.segments.end(), int64_t{0})),
        q_offset(c.q_offset),
        window(c.window) {
    n = c.n >= 0 ? c.n : T - q_offset;
    tk = c.tk >= 0 ? c.tk : T;
    scale = 1.0f / std::sqrt(static_cast<float>(h));
    int64_t start = 0;
    for (int64_t len : c.segments) {
      for (int64_t i = 0; i < len; ++i) seg.push_back(static_cast<int32_t>(start));
      start += len;
    }
    Rng rng(seed, "attention_test");
    auto normal = [&](int64_t count, float s) {
      std::vector<float> x(static_cast<size_t>(count));
      for (float& e : x) e = s * rng.normal();
      return x;
    };
    // Queries a bit larger than unit so that the softmax is not nearly uniform.
    q = normal(n * H * h, 2.0f);
    k = normal(tk * G * h, 1.0f);
    v = normal(tk * G * h, 1.0f);
    dout = normal(n * H * h, 1.0f);
    w = normal(n * H * h, 1.0f);
  }

  AttentionDims dims() const { return {H, G, h, scale, window}; }
  // The first key global row r sees, written directly from the rule of backend.h:
  // max(seg_start[r], r - window + 1) with a window, seg_start[r] without.
  int64_t first_key(int64_t r) const {
    const int64_t s = seg[static_cast<size_t>(r)];
    return window > 0 ? std::max(s, r - window + 1) : s;
  }
  Tensor qt() const { return view(q, n, H * h); }
  Tensor kt() const { return view(k, tk, G * h); }
  Tensor vt() const { return view(v, tk, G * h); }
  Tensor doutt() const { return view(dout, n, H * h); }
  Tensor segt() const { return Tensor(const_cast<int32_t*>(seg.data()), DType::I32, Shape{T}); }
  static Tensor view(const std::vector<float>& x, int64_t rows, int64_t cols) {
    return Tensor(const_cast<float*>(x.data()), DType::F32, Shape{rows, cols});
  }
};

struct Grads {
  std::vector<float> dq, dk, dv;
};

struct Result {
  std::vector<float> out, lse;
  Grads g;
  int64_t fwd_flops = 0, bwd_flops = 0;
};

// Kernel forward + backward with pre-zeroed gradients.
Result run_kernel(const Problem& p) {
  Result r;
  r.out.assign(static_cast<size_t>(p.n * p.H * p.h), 0.0f);
  r.lse.assign(static_cast<size_t>(p.n * p.H), 0.0f);
  r.g.dq.assign(r.out.size(), 0.0f);
  r.g.dk.assign(static_cast<size_t>(p.tk * p.G * p.h), 0.0f);
  r.g.dv.assign(r.g.dk.size(), 0.0f);
  const Tensor out = Problem::view(r.out, p.n, p.H * p.h);
  const Tensor lse = Problem::view(r.lse, p.n, p.H);
  cpu::attention_forward(out, lse, p.qt(), p.kt(), p.vt(), p.segt(), p.q_offset, p.dims(),
                         &r.fwd_flops);
  cpu::attention_backward(Problem::view(r.g.dq, p.n, p.H * p.h),
                          Problem::view(r.g.dk, p.tk, p.G * p.h),
                          Problem::view(r.g.dv, p.tk, p.G * p.h), p.doutt(), p.qt(), p.kt(), p.vt(),
                          out, lse, p.segt(), p.q_offset, p.dims(), &r.bwd_flops);
  return r;
}

// ---- float64 reference: scores materialised per query row ----

struct RefResult {
  std::vector<double> out, lse, dq, dk, dv;
};

// Forward of the reference with double inputs (so finite differences can perturb them).
void ref_forward(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, std::vector<double>* out, std::vector<double>* lse) {
  const int64_t H = p.H, G = p.G, h = p.h, group = H / G;
  out->assign(static_cast<size_t>(p.n * H * h), 0.0);
  lse->assign(static_cast<size_t>(p.n * H), 0.0);
  std::vector<double> s;
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t gi = p.q_offset + i;
    const int64_t j0 = p.first_key(gi);
    for (int64_t hq = 0; hq < H; ++hq) {
      const int64_t g = hq / group;
      const double* qi = &q[static_cast<size_t>(i * H * h + hq * h)];
      s.assign(static_cast<size_t>(gi - j0 + 1), 0.0);
      double mx = -INFINITY;
      for (int64_t j = j0; j <= gi; ++j) {
        const double* kj = &k[static_cast<size_t>(j * G * h + g * h)];
        double dot = 0.0;
        for (int64_t d = 0; d < h; ++d) dot += qi[d] * kj[d];
        s[static_cast<size_t>(j - j0)] = p.scale * dot;
        mx = std::max(mx, s[static_cast<size_t>(j - j0)]);
      }
      double sum = 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      (*lse)[static_cast<size_t>(i * H + hq)] = mx + std::log(sum);
      double* oi = &(*out)[static_cast<size_t>(i * H * h + hq * h)];
      for (int64_t j = j0; j <= gi; ++j) {
        const double pj = s[static_cast<size_t>(j - j0)] / sum;
        const double* vj = &v[static_cast<size_t>(j * G * h + g * h)];
        for (int64_t d = 0; d < h; ++d) oi[d] += pj * vj[d];
      }
    }
  }
}

std::vector<double> to_double(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

RefResult reference(const Problem& p) {
  const int64_t H = p.H, G = p.G, h = p.h, group = H / G;
  const std::vector<double> q = to_double(p.q), k = to_double(p.k), v = to_double(p.v);
  RefResult r;
  ref_forward(p, q, k, v, &r.out, &r.lse);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t gi = p.q_offset + i;
    const int64_t j0 = p.first_key(gi);
    for (int64_t hq = 0; hq < H; ++hq) {
      const int64_t g = hq / group;
      const size_t qo = static_cast<size_t>(i * H * h + hq * h);
      const double lse = r.lse[static_cast<size_t>(i * H + hq)];
      double dd = 0.0;  // D = dout . out
      for (int64_t d = 0; d < h; ++d) dd += p.dout[qo + d] * r.out[qo + d];
      for (int64_t j = j0; j <= gi; ++j) {
        const size_t ko = static_cast<size_t>(j * G * h + g * h);
        double dot = 0.0, dp = 0.0;
        for (int64_t d = 0; d < h; ++d) {
          dot += q[qo + d] * k[ko + d];
          dp += p.dout[qo + d] * v[ko + d];
        }
        const double pj = std::exp(p.scale * dot - lse);
        const double ds = pj * (dp - dd) * p.scale;
        for (int64_t d = 0; d < h; ++d) {
          r.dq[qo + d] += ds * k[ko + d];
          r.dk[ko + d] += ds * q[qo + d];
          r.dv[ko + d] += pj * p.dout[qo + d];
        }
      }
    }
  }
  return r;
}

double err(const std::vector<float>& a, const std::vector<double>& ref) {
  const std::vector<float> b(ref.begin(), ref.end());
  EXPECT_EQ(a.size(), b.size());
  return rel_err(a.data(), b.data(), static_cast<int64_t>(b.size()));
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs a block with omp_get_max_threads() == n and restores the old value.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : old_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(old_); }

 private:
  int old_;
};

// The kernel takes the per-kv-head backward when 5 * ceil(G / threads) * threads <= 7 * G:
// always with one thread, never with 2G threads.
int threads_per_kv_head_path(const Problem&) { return 1; }
int threads_two_pass_path(const Problem& p) { return static_cast<int>(2 * p.G); }

std::vector<Case> reference_cases() {
  return {
      {"mha_one_segment", 2, 2, 16, {150}},
      {"gqa_uneven_segments", 4, 2, 64, {70, 1, 1, 50, 78}},
      {"gqa3_chunk_in_middle", 6, 2, 24, {1, 64, 65, 30}, 40, 57, 97},
      {"mqa_two_segments", 4, 1, 8, {33, 67}},
      {"mqa_many_length1", 3, 1, 16, {1, 1, 1, 5, 1, 63, 1, 1, 29}},
      {"tiny_n1_last_row", 2, 1, 16, {70}, 69, 1},
      {"n1_in_middle_unseen_keys", 4, 2, 8, {40, 90}, 100, 1},
      {"chunk_keys_past_queries", 2, 1, 64, {50, 80}, 64, 33},
      {"head_dim_12_tail", 4, 2, 12, {20, 100}},
      {"boundary_at_tile", 2, 1, 24, {64, 64, 3}},
      {"chunk_spanning_blocks", 4, 2, 16, {100, 200, 60}, 90, 230, 320},
      {"head_dim_128", 2, 1, 128, {40, 90}},
  };
}

// Forward and backward against the float64 reference, on the per-kv-head and the two-pass
// backward; the two paths give the same bits.
void check_against_reference(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Problem p(c);
    const RefResult ref = reference(p);
    Result one, two;
    {
      ThreadCount tc(threads_per_kv_head_path(p));
      one = run_kernel(p);
    }
    {
      ThreadCount tc(threads_two_pass_path(p));
      two = run_kernel(p);
    }
    EXPECT_LT(err(one.out, ref.out), kTol);
    EXPECT_LT(err(one.lse, ref.lse), kTol);
    EXPECT_LT(err(one.g.dq, ref.dq), kTol);
    EXPECT_LT(err(one.g.dk, ref.dk), kTol);
    EXPECT_LT(err(one.g.dv, ref.dv), kTol);
    // Both backward paths add the same terms in the same order: bit-identical, whatever the
    // thread count. So is the forward (each output row is owned by one task).
    EXPECT_TRUE(bit_equal(one.out, two.out));
    EXPECT_TRUE(bit_equal(one.lse, two.lse));
    EXPECT_TRUE(bit_equal(one.g.dq, two.g.dq));
    EXPECT_TRUE(bit_equal(one.g.dk, two.g.dk));
    EXPECT_TRUE(bit_equal(one.g.dv, two.g.dv));
    // Keys no query of this call sees get exactly zero gradient.
    for (int64_t j = 0; j < p.tk; ++j) {
      const bool seen = j < p.q_offset + p.n && j >= p.first_key(p.q_offset);
      if (seen) continue;
      for (int64_t c2 = 0; c2 < p.G * p.h; ++c2) {
        ASSERT_EQ(one.g.dk[static_cast<size_t>(j * p.G * p.h + c2)], 0.0f) << "key " << j;
        ASSERT_EQ(one.g.dv[static_cast<size_t>(j * p.G * p.h + c2)], 0.0f) << "key " << j;
      }
    }
  }
}

TEST(Attention, MatchesFloat64ReferenceOnBothBackwardPaths) {
  check_against_reference(reference_cases());
}

TEST(Attention, DeterministicAcrossRunsAndThreadCounts) {
  const Problem p(Case{"det", 4, 2, 24, {100, 3, 90}});
  Result base;
  {
    ThreadCount tc(2);
    base = run_kernel(p);
  }
  for (int threads : {2, 1, 3}) {
    ThreadCount tc(threads);
    const Result r = run_kernel(p);
    EXPECT_TRUE(bit_equal(r.out, base.out)) << threads;
    EXPECT_TRUE(bit_equal(r.lse, base.lse)) << threads;
    EXPECT_TRUE(bit_equal(r.g.dq, base.g.dq)) << threads;
    EXPECT_TRUE(bit_equal(r.g.dk, base.g.dk)) << threads;
    EXPECT_TRUE(bit_equal(r.g.dv, base.g.dv)) << threads;
  }
}

TEST(Attention, BackwardAccumulates) {
  for (int threads : {1, 4})          // G = 2: per-kv-head path, then two passes
    for (int64_t window : {0, 20}) {  // without and with a sliding window
      SCOPED_TRACE("threads " + std::to_string(threads) + " window " + std::to_string(window));
      ThreadCount tc(threads);
      const Problem p(Case{"acc", 4, 2, 16, {30, 47}, 0, -1, -1, window});
      Result r = run_kernel(p);
      const Grads once = r.g;
      const Tensor out = Problem::view(r.out, p.n, p.H * p.h);
      const Tensor lse = Problem::view(r.lse, p.n, p.H);
      cpu::attention_backward(Problem::view(r.g.dq, p.n, p.H * p.h),
                              Problem::view(r.g.dk, p.tk, p.G * p.h),
                              Problem::view(r.g.dv, p.tk, p.G * p.h), p.doutt(), p.qt(), p.kt(),
                              p.vt(), out, lse, p.segt(), p.q_offset, p.dims(), nullptr);
      auto twice = [](std::vector<float> x) {
        for (float& e : x) e *= 2.0f;
        return x;
      };
      const std::vector<float> dq2 = twice(once.dq), dk2 = twice(once.dk), dv2 = twice(once.dv);
      EXPECT_LT(rel_err(r.g.dq.data(), dq2.data(), static_cast<int64_t>(dq2.size())), 1e-6);
      EXPECT_LT(rel_err(r.g.dk.data(), dk2.data(), static_cast<int64_t>(dk2.size())), 1e-6);
      EXPECT_LT(rel_err(r.g.dv.data(), dv2.data(), static_cast<int64_t>(dv2.size())), 1e-6);
    }
}

// L = sum(out * W). The kernel's fp32 gradient is checked against central differences of the
// float64 reference forward (accurate to ~1e-9), and the float64 reference gradient is checked
// against the same differences, so a wrong reference cannot hide a wrong kernel.
void check_finite_differences(const Case& c) {
  SCOPED_TRACE(describe(c));
  Problem p(c);
  // The upstream gradient of L = sum(out * W) is W.
  p.dout = p.w;
  Result kernel;
  {
    ThreadCount tc(1);
    kernel = run_kernel(p);
  }
  const RefResult ref = reference(p);
  std::vector<double> q = to_double(p.q), k = to_double(p.k), v = to_double(p.v);
  auto loss = [&]() {
    std::vector<double> out, lse;
    ref_forward(p, q, k, v, &out, &lse);
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * p.w[i];
    return l;
  };
  const double eps = 1e-5;
  auto fd = [&](std::vector<double>& x) {
    std::vector<double> g(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + eps;
      const double lp = loss();
      x[i] = x0 - eps;
      const double lm = loss();
      x[i] = x0;
      g[i] = (lp - lm) / (2 * eps);
    }
    return g;
  };
  const std::vector<double> gq = fd(q), gk = fd(k), gv = fd(v);
  auto derr = [](const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      num = std::max(num, std::fabs(a[i] - b[i]));
      den = std::max(den, std::fabs(b[i]));
    }
    return num / den;
  };
  EXPECT_LT(derr(ref.dq, gq), 1e-7);
  EXPECT_LT(derr(ref.dk, gk), 1e-7);
  EXPECT_LT(derr(ref.dv, gv), 1e-7);
  EXPECT_LT(err(kernel.g.dq, gq), kTol);
  EXPECT_LT(err(kernel.g.dk, gk), kTol);
  EXPECT_LT(err(kernel.g.dv, gv), kTol);
}

TEST(Attention, GradientMatchesFiniteDifferences) {
  check_finite_differences(Case{"fd", 2, 1, 8, {5, 7}, 2, 10});
}

// StreamBP's use: forward per row chunk [s, e) with q_offset = s against keys [0, e), and the
// backward of the chunks summed into the same dk, dv.
void check_chunks_equal_full_range(const Case& c, const std::vector<int64_t>& bounds) {
  SCOPED_TRACE(describe(c));
  const Problem full(c);
  Result whole;
  {
    ThreadCount tc(2);
    whole = run_kernel(full);
  }
  const int64_t H = full.H, h = full.h, Gh = full.G * full.h;
  std::vector<float> out(whole.out.size()), lse(whole.lse.size()), dq(whole.g.dq.size()),
      dk(whole.g.dk.size(), 0.0f), dv(whole.g.dv.size(), 0.0f);
  ThreadCount tc(2);
  for (size_t ci = 0; ci + 1 < bounds.size(); ++ci) {
    const int64_t s = bounds[ci], e = bounds[ci + 1];
    auto rows = [&](std::vector<float>& x, int64_t cols, int64_t r0, int64_t r1) {
      return Tensor(x.data() + r0 * cols, DType::F32, Shape{r1 - r0, cols});
    };
    auto crows = [&](const std::vector<float>& x, int64_t cols, int64_t r0, int64_t r1) {
      return rows(const_cast<std::vector<float>&>(x), cols, r0, r1);
    };
    const Tensor q = crows(full.q, H * h, s, e), k = crows(full.k, Gh, 0, e),
                 v = crows(full.v, Gh, 0, e), d = crows(full.dout, H * h, s, e);
    const Tensor o = rows(out, H * h, s, e), l = rows(lse, H, s, e);
    cpu::attention_forward(o, l, q, k, v, full.segt(), s, full.dims(), nullptr);
    std::fill(dq.begin() + s * H * h, dq.begin() + e * H * h, 0.0f);
    cpu::attention_backward(rows(dq, H * h, s, e), rows(dk, Gh, 0, e), rows(dv, Gh, 0, e), d, q, k,
                            v, o, l, full.segt(), s, full.dims(), nullptr);
  }
  // Key tiles are aligned to absolute positions and masked scores add exact zeros, so the
  // forward of a row, and its dq, do not depend on the chunking. dk and dv sum over chunks in
  // another order.
  EXPECT_TRUE(bit_equal(out, whole.out));
  EXPECT_TRUE(bit_equal(lse, whole.lse));
  EXPECT_TRUE(bit_equal(dq, whole.g.dq));
  EXPECT_LT(rel_err(dk.data(), whole.g.dk.data(), static_cast<int64_t>(dk.size())), 1e-5);
  EXPECT_LT(rel_err(dv.data(), whole.g.dv.data(), static_cast<int64_t>(dv.size())), 1e-5);
}

TEST(Attention, ChunksEqualFullRange) {
  check_chunks_equal_full_range(Case{"chunks", 4, 2, 16, {37, 1, 90, 2, 70}},
                                {0, 37, 38, 100, 129, 150, 200});
}

// ---- sliding window ----

// Windows shorter than, equal to and longer than the query chunk (n) and the segments, window 2,
// chunks in the middle of the sequence (q_offset > 0, keys past the queries), several segments,
// GQA, MQA, a head dim with a scalar tail, windows that end inside and on key tiles (64) and
// query blocks (128).
std::vector<Case> window_cases() {
  return {
      {"w2", 2, 1, 8, {3, 1, 80}, 0, -1, -1, 2},
      {"w_shorter_than_segments", 4, 2, 16, {70, 1, 1, 150, 78}, 0, -1, -1, 40},
      {"w_longer_than_some_segments", 4, 2, 16, {30, 50, 20, 200}, 0, -1, -1, 64},
      {"w_shorter_than_chunk", 4, 2, 24, {300}, 140, 90, 230, 50},
      {"w_equal_to_chunk", 4, 2, 16, {100, 200}, 130, 70, 250, 70},
      {"w_longer_than_chunk", 4, 2, 16, {100, 260}, 150, 60, 300, 200},
      {"w_longer_than_chunk_and_segment", 4, 2, 16, {100, 60, 200}, 130, 90, 330, 150},
      {"w_query_block", 2, 1, 32, {384}, 0, -1, -1, 128},
      {"w_tile_plus_one_mqa", 4, 1, 8, {33, 300}, 0, -1, -1, 65},
      {"w_head_dim_12_tail", 4, 2, 12, {200, 57}, 0, -1, -1, 37},
      {"w_one_row_in_middle", 4, 2, 8, {40, 200}, 170, 1, 230, 30},
      {"w_past_every_row", 4, 2, 16, {60, 90}, 20, 100, 150, 1000},
  };
}

TEST(Attention, SlidingWindowMatchesFloat64ReferenceOnBothBackwardPaths) {
  check_against_reference(window_cases());
}

// Window 1: every row attends to its own key only, so p = 1 exactly: out is the row's value,
// bit for bit, and lse its scaled score; dv_j is the sum of dout over the query heads of kv
// head g at row j; dq and dk vanish. The relative checks of check_against_reference cannot
// take an exact-zero reference (the kernel's dP - D is two orderings of one dot product, a
// rounding apart), so dq and dk are bounded against the size of dv.
TEST(Attention, WindowOneAttendsToItsOwnKeyOnly) {
  const std::vector<Case> cases = {
      {"w1_every_row_sees_itself", 4, 2, 16, {150}, 0, -1, -1, 1},
      {"w1_chunk_segments", 4, 2, 16, {20, 1, 129}, 30, 100, 140, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Problem p(c);
    const RefResult ref = reference(p);
    for (int threads : {1, 4}) {  // per kv head, two passes
      SCOPED_TRACE(threads);
      ThreadCount tc(threads);
      const Result r = run_kernel(p);
      const int64_t group = p.H / p.G;
      for (int64_t i = 0; i < p.n; ++i)
        for (int64_t hq = 0; hq < p.H; ++hq)
          for (int64_t d = 0; d < p.h; ++d) {
            const float o = r.out[static_cast<size_t>((i * p.H + hq) * p.h + d)];
            const int64_t kv = ((p.q_offset + i) * p.G + hq / group) * p.h + d;
            ASSERT_EQ(o, p.v[static_cast<size_t>(kv)]) << "row " << i << " head " << hq;
          }
      EXPECT_LT(err(r.lse, ref.lse), kTol);
      EXPECT_LT(err(r.g.dv, ref.dv), kTol);
      double dv_max = 0.0, dq_max = 0.0, dk_max = 0.0;
      for (float x : r.g.dv) dv_max = std::max(dv_max, std::fabs(static_cast<double>(x)));
      for (float x : r.g.dq) dq_max = std::max(dq_max, std::fabs(static_cast<double>(x)));
      for (float x : r.g.dk) dk_max = std::max(dk_max, std::fabs(static_cast<double>(x)));
      EXPECT_GT(dv_max, 1.0);
      EXPECT_LT(dq_max, kTol * dv_max);
      EXPECT_LT(dk_max, kTol * dv_max);
    }
  }
}

TEST(Attention, SlidingWindowGradientMatchesFiniteDifferences) {
  // GQA; queries [3, 14) of two segments against 16 keys, window 4 (shorter than a segment)
  check_finite_differences(Case{"fd_window", 4, 2, 8, {9, 7}, 3, 11, 16, 4});
  // window 2: a row and the one key before it
  check_finite_differences(Case{"fd_window2", 2, 1, 8, {6, 6}, 2, 8, 12, 2});
}

// Stream mode's chunks with a window: chunk boundaries that cut windows, segments and query
// blocks. Bitwise for out, lse and dq for the reason given in check_chunks_equal_full_range: a
// row's key tiles sit at absolute positions, and a block that starts earlier only adds tiles
// and keys that are masked for this row (exact zeros). dk and dv to fp32 tolerance: chunking
// changes the order in which query rows add into them.
TEST(Attention, SlidingWindowChunksEqualFullRange) {
  check_chunks_equal_full_range(Case{"chunks_window", 4, 2, 16, {37, 1, 250, 2, 70}, 0, -1, -1, 45},
                                {0, 37, 38, 100, 129, 200, 300, 360});
  check_chunks_equal_full_range(Case{"chunks_window_long", 4, 2, 16, {360}, 0, -1, -1, 150},
                                {0, 64, 200, 201, 330, 360});
}

// window = 0, and any window at least as long as every row's index + 1, give the same keys, so
// the same bits: the windowless kernel (first_key = seg_start) on both backward paths.
TEST(Attention, WindowPastEveryRowIsNoWindowBitwise) {
  // queries [70, 200) against 251 keys; segments start at 0, 60, 61
  const Case base{"no_window", 4, 2, 16, {60, 1, 190}, 70, 130, 251};
  Result none[2];
  {
    ThreadCount tc(1);
    none[0] = run_kernel(Problem(base));
  }
  {
    ThreadCount tc(4);
    none[1] = run_kernel(Problem(base));
  }
  // Row 199 sees the most keys, [61, 199]: a window of 139 or more changes no row; 251 = Tk.
  for (int64_t window : {int64_t{139}, int64_t{200}, int64_t{251}, int64_t{1} << 40}) {
    Case c = base;
    c.window = window;
    for (int path = 0; path < 2; ++path) {
      SCOPED_TRACE("window " + std::to_string(window) + " path " + std::to_string(path));
      ThreadCount tc(path == 0 ? 1 : 4);
      const Result r = run_kernel(Problem(c));
      EXPECT_TRUE(bit_equal(r.out, none[path].out));
      EXPECT_TRUE(bit_equal(r.lse, none[path].lse));
      EXPECT_TRUE(bit_equal(r.g.dq, none[path].g.dq));
      EXPECT_TRUE(bit_equal(r.g.dk, none[path].g.dk));
      EXPECT_TRUE(bit_equal(r.g.dv, none[path].g.dv));
      EXPECT_EQ(r.fwd_flops, none[path].fwd_flops);
      EXPECT_EQ(r.bwd_flops, none[path].bwd_flops);
    }
  }
  // One key less (window 138): row 199 loses key 61, and the result changes.
  Case c = base;
  c.window = 138;
  ThreadCount tc(1);
  EXPECT_FALSE(bit_equal(run_kernel(Problem(c)).out, none[0].out));
}

// Keys outside every row's window are skipped, not masked. The last row of a 128-row segment,
// window 64, sees keys [64, 127]: exactly key tile 1, unmasked; tile 0 is never touched, so the
// count is that of CountsTheTileProducts' single tile pair, half the windowless one. Window 65
// adds key 63, the last key of tile 0, trimmed to a 1-key tile. On a long sequence the count
// goes as n * window.
TEST(Attention, SlidingWindowCountsOnlyTheTilesInTheWindow) {
  const int64_t h = 16, H = 2;
  // The products of one query (score tiles padded to 8 query columns) against nk keys that it
  // all sees: forward S^T and P V; per-kv-head backward S^T, dP^T, dV, dK, dQ; two passes:
  // pass A S^T, dP^T, dQ, pass B S and dP (nk padded to 8 key columns), dV and dK.
  auto fwd = [&](int64_t nk) { return H * (2 * nk * 8 * h + 2 * h * nk); };
  auto bwd_one = [&](int64_t nk) { return H * (2 * (2 * nk * 8 * h) + 3 * (2 * h * nk)); };
  auto bwd_two = [&](int64_t nk) {
    const int64_t nkp = (nk + 7) / 8 * 8;
    return H * (2 * (2 * nk * 8 * h) + 2 * h * nk + 2 * (2 * nkp * h) + 2 * (2 * h * nk));
  };
  struct Expect {
    int64_t window, fwd, bwd_one, bwd_two;
  };
  const Expect expects[] = {
      {0, 2 * fwd(64), 2 * bwd_one(64), 2 * bwd_two(64)},  // both tiles
      {64, fwd(64), bwd_one(64), bwd_two(64)},             // tile 1 only
      {65, fwd(64) + fwd(1), bwd_one(64) + bwd_one(1), bwd_two(64) + bwd_two(1)},
      {1, fwd(1), bwd_one(1), bwd_two(1)},  // key 127 alone
  };
  for (const Expect& e : expects) {
    SCOPED_TRACE("window " + std::to_string(e.window));
    const Problem p(Case{"flops_window", H, 1, h, {128}, 127, 1, 128, e.window});
    {
      ThreadCount tc(1);  // per kv head
      const Result r = run_kernel(p);
      EXPECT_EQ(r.fwd_flops, e.fwd);
      EXPECT_EQ(r.bwd_flops, e.bwd_one);
    }
    {
      ThreadCount tc(2);  // two passes
      const Result r = run_kernel(p);
      EXPECT_EQ(r.fwd_flops, e.fwd);
      EXPECT_EQ(r.bwd_flops, e.bwd_two);
    }
  }
  // 2048 rows, window 128: query block b > 0 (rows [128b, 128b + 127]) sees keys
  // [128b - 127, 128b + 127], 4 key tiles, where the causal block sees 2b + 2 tiles (62 tile
  // pairs against 272 over the 16 blocks). The count lies between the pairs the window allows
  // and the dense tiles visited, and far below the causal count.
  {
    const Case causal{"flops_long", 2, 1, 16, {2048}};
    Case windowed = causal;
    windowed.window = 128;
    ThreadCount tc(1);
    const Result rc = run_kernel(Problem(causal)), rw = run_kernel(Problem(windowed));
    const int64_t T = 2048, w = 128, hH = 16 * 2;
    const int64_t allowed = (w * (w + 1) / 2 + (T - w) * w) * hH * 2;   // 2 h FLOPs per pair
    const int64_t tiles = (2 + (T / 128 - 1) * 4) * 128 * 64 * hH * 2;  // dense tile pairs
    EXPECT_GT(rw.fwd_flops, 2 * allowed);
    EXPECT_LE(rw.fwd_flops, 2 * tiles);
    EXPECT_GT(rw.bwd_flops, 5 * allowed);
    EXPECT_LE(rw.bwd_flops, 5 * tiles);
    EXPECT_LT(3 * rw.fwd_flops, rc.fwd_flops);
    EXPECT_LT(3 * rw.bwd_flops, rc.bwd_flops);
    std::printf("[window flops] T=2048 w=128: forward %lld vs causal %lld, backward %lld vs %lld\n",
                static_cast<long long>(rw.fwd_flops), static_cast<long long>(rc.fwd_flops),
                static_cast<long long>(rw.bwd_flops), static_cast<long long>(rc.bwd_flops));
  }
}

TEST(Attention, CountsTheTileProducts) {
  // The last row of a 64-row segment sees all 64 keys: one unmasked tile pair. The score
  // tiles are 8 query columns wide (the one query, padded to a vector), the others 1 row.
  {
    const Problem p(Case{"flops_full", 2, 1, 16, {64}, 63, 1});
    const int64_t h = p.h, H = p.H;
    const int64_t scores = 2 * 64 * 8 * h;    // S^T or dP^T: 64 keys x 8 query columns
    const int64_t row = 2 * 1 * h * 64;       // P V, dS K, P^T dO or dS^T Q of one query
    const int64_t scores_b = 2 * 1 * 64 * h;  // pass B's S or dP: 1 query x 64 keys
    {
      ThreadCount tc(1);  // per kv head
      const Result r = run_kernel(p);
      EXPECT_EQ(r.fwd_flops, H * (scores + row));
      EXPECT_EQ(r.bwd_flops, H * (2 * scores + 3 * row));
    }
    {
      ThreadCount tc(2);  // two passes: S^T, dP^T, dS K; then S, dP, P^T dO, dS^T Q
      const Result r = run_kernel(p);
      EXPECT_EQ(r.bwd_flops, H * (2 * scores + row + 2 * scores_b + 2 * row));
    }
    // *flops is added to, not overwritten.
    int64_t flops = 1000;
    std::vector<float> out(p.q.size()), lse(static_cast<size_t>(p.n * p.H));
    cpu::attention_forward(Problem::view(out, p.n, p.H * p.h), Problem::view(lse, p.n, p.H), p.qt(),
                           p.kt(), p.vt(), p.segt(), p.q_offset, p.dims(), &flops);
    EXPECT_EQ(flops, 1000 + H * (scores + row));
  }
  // Causal 64 x 64: the micro-tiles above the diagonal are skipped, so the count lies between
  // the allowed pairs (64 * 65 / 2 per head) and the dense tile.
  {
    const Problem p(Case{"flops_causal", 2, 1, 16, {64}});
    ThreadCount tc(1);
    const Result r = run_kernel(p);
    const int64_t dense = 2 * 64 * 64 * p.h * p.H, allowed = 2 * (64 * 65 / 2) * p.h * p.H;
    EXPECT_LT(r.fwd_flops, 2 * dense);
    EXPECT_GT(r.fwd_flops, 2 * allowed);
    EXPECT_LT(r.bwd_flops, 5 * dense);
    EXPECT_GT(r.bwd_flops, 5 * allowed);
  }
}

TEST(Attention, RejectsBadShapes) {
  const Problem p(Case{"shapes", 4, 2, 8, {20}});
  std::vector<float> out(p.q.size()), lse(static_cast<size_t>(p.n * p.H));
  const Tensor o = Problem::view(out, p.n, p.H * p.h), l = Problem::view(lse, p.n, p.H);
  // H not a multiple of G
  EXPECT_THROW(cpu::attention_forward(o, l, p.qt(), p.kt(), p.vt(), p.segt(), 0,
                                      AttentionDims{4, 3, 8, 1.0f}, nullptr),
               ShapeError);
  // a softmax scale that is not a number
  EXPECT_THROW(cpu::attention_forward(o, l, p.qt(), p.kt(), p.vt(), p.segt(), 0,
                                      AttentionDims{4, 2, 8, std::nanf("")}, nullptr),
               ShapeError);
  // q_offset + n past the keys
  EXPECT_THROW(cpu::attention_forward(o, l, p.qt(), p.kt(), p.vt(), p.segt(), 1, p.dims(), nullptr),
               ShapeError);
  // lse of the wrong width
  EXPECT_THROW(cpu::attention_forward(o, Problem::view(lse, p.n * p.H / 2, 2), p.qt(), p.kt(),
                                      p.vt(), p.segt(), 0, p.dims(), nullptr),
               ShapeError);
  // a segment start past its row
  std::vector<int32_t> bad(p.seg);
  bad[5] = 6;
  EXPECT_THROW(
      cpu::attention_forward(o, l, p.qt(), p.kt(), p.vt(),
                             Tensor(bad.data(), DType::I32, Shape{p.T}), 0, p.dims(), nullptr),
      ShapeError);
  // dk not shaped like k
  std::vector<float> g(p.k.size() + p.G * p.h);
  EXPECT_THROW(cpu::attention_backward(Problem::view(out, p.n, p.H * p.h),
                                       Problem::view(g, p.tk + 1, p.G * p.h),
                                       Problem::view(g, p.tk + 1, p.G * p.h), p.doutt(), p.qt(),
                                       p.kt(), p.vt(), o, l, p.segt(), 0, p.dims(), nullptr),
               ShapeError);
}

// ---- BF16 operands ----

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
  return b;
}
std::vector<float> rounded(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}
Tensor bview(const std::vector<uint16_t>& x, int64_t rows, int64_t cols) {
  return Tensor(const_cast<uint16_t*>(x.data()), DType::BF16, Shape{rows, cols});
}
std::vector<float> widened(const std::vector<uint16_t>& x) {
  std::vector<float> f(x.size());
  for (size_t i = 0; i < x.size(); ++i) f[i] = bf16_to_f32(x[i]);
  return f;
}

// BF16 inputs are widened exactly when packed and BF16 outputs rounded once when stored, so on
// bf16-representable values: F32 outputs from BF16 inputs have the F32 kernel's bits, and BF16
// outputs (accumulated onto BF16 gradients) are those bits rounded to nearest even. Whatever
// the thread count and backward path (a BF16 dk or dv takes the two passes).
void check_bf16_operands(const Case& c) {
  SCOPED_TRACE(describe(c));
  Problem p(c);
  p.q = rounded(p.q);
  p.k = rounded(p.k);
  p.v = rounded(p.v);
  p.dout = rounded(p.dout);
  const std::vector<uint16_t> q16 = to_bf16(p.q), k16 = to_bf16(p.k), v16 = to_bf16(p.v),
                              do16 = to_bf16(p.dout);
  const int64_t Hh = p.H * p.h, Gh = p.G * p.h;
  // Non-zero starting gradients, bf16-representable.
  Rng rng(5, "bf16 gradients");
  auto start = [&](int64_t count) {
    std::vector<float> x(static_cast<size_t>(count));
    for (float& e : x) e = bf16_to_f32(f32_to_bf16(rng.normal()));
    return x;
  };
  const std::vector<float> dq0 = start(p.n * Hh), dk0 = start(p.tk * Gh), dv0 = start(p.tk * Gh);

  // The F32 kernel, one thread (per-kv-head backward).
  std::vector<float> out(static_cast<size_t>(p.n * Hh)), lse(static_cast<size_t>(p.n * p.H));
  std::vector<float> dq = dq0, dk = dk0, dv = dv0;
  {
    ThreadCount tc(1);
    cpu::attention_forward(Problem::view(out, p.n, Hh), Problem::view(lse, p.n, p.H), p.qt(),
                           p.kt(), p.vt(), p.segt(), p.q_offset, p.dims(), nullptr);
    cpu::attention_backward(Problem::view(dq, p.n, Hh), Problem::view(dk, p.tk, Gh),
                            Problem::view(dv, p.tk, Gh), p.doutt(), p.qt(), p.kt(), p.vt(),
                            Problem::view(out, p.n, Hh), Problem::view(lse, p.n, p.H), p.segt(),
                            p.q_offset, p.dims(), nullptr);
  }
  for (int threads : {1, 2, 4}) {  // G = 2: 1 and 2 threads one pass, 4 threads two passes
    SCOPED_TRACE(threads);
    ThreadCount tc(threads);
    // Forward: BF16 q, k, v into an F32 out, then into a BF16 out.
    std::vector<float> o32(out.size()), l32(lse.size()), l16(lse.size());
    std::vector<uint16_t> o16(out.size());
    cpu::attention_forward(Problem::view(o32, p.n, Hh), Problem::view(l32, p.n, p.H),
                           bview(q16, p.n, Hh), bview(k16, p.tk, Gh), bview(v16, p.tk, Gh),
                           p.segt(), p.q_offset, p.dims(), nullptr);
    cpu::attention_forward(bview(o16, p.n, Hh), Problem::view(l16, p.n, p.H), bview(q16, p.n, Hh),
                           bview(k16, p.tk, Gh), bview(v16, p.tk, Gh), p.segt(), p.q_offset,
                           p.dims(), nullptr);
    EXPECT_TRUE(bit_equal(o32, out));
    EXPECT_TRUE(bit_equal(l32, lse));
    EXPECT_TRUE(bit_equal(l16, lse));
    EXPECT_TRUE(bit_equal(widened(o16), rounded(out)));
    // Backward: BF16 inputs into F32 gradients, then into BF16 gradients.
    std::vector<float> gq = dq0, gk = dk0, gv = dv0;
    cpu::attention_backward(Problem::view(gq, p.n, Hh), Problem::view(gk, p.tk, Gh),
                            Problem::view(gv, p.tk, Gh), bview(do16, p.n, Hh), bview(q16, p.n, Hh),
                            bview(k16, p.tk, Gh), bview(v16, p.tk, Gh), Problem::view(out, p.n, Hh),
                            Problem::view(lse, p.n, p.H), p.segt(), p.q_offset, p.dims(), nullptr);
    EXPECT_TRUE(bit_equal(gq, dq));
    EXPECT_TRUE(bit_equal(gk, dk));
    EXPECT_TRUE(bit_equal(gv, dv));
    std::vector<uint16_t> bq = to_bf16(dq0), bk = to_bf16(dk0), bv = to_bf16(dv0);
    cpu::attention_backward(bview(bq, p.n, Hh), bview(bk, p.tk, Gh), bview(bv, p.tk, Gh),
                            bview(do16, p.n, Hh), bview(q16, p.n, Hh), bview(k16, p.tk, Gh),
                            bview(v16, p.tk, Gh), Problem::view(out, p.n, Hh),
                            Problem::view(lse, p.n, p.H), p.segt(), p.q_offset, p.dims(), nullptr);
    EXPECT_TRUE(bit_equal(widened(bq), rounded(dq)));
    EXPECT_TRUE(bit_equal(widened(bk), rounded(dk)));
    EXPECT_TRUE(bit_equal(widened(bv), rounded(dv)));
  }
}

TEST(Attention, Bf16OperandsGiveTheF32BitsRoundedOnce) {
  check_bf16_operands(Case{"bf16", 4, 2, 24, {100, 3, 90}, 40, 150, 193});
  check_bf16_operands(Case{"bf16_window", 4, 2, 24, {100, 3, 90}, 40, 150, 193, 37});
}

// With a BF16 out, D = rowsum(dout * out) would carry out's bf16 rounding (relative 2^-9) and
// break the cancellation sum_j dS_ij = 0; the kernel sums D = sum_j P_ij dP_ij in fp32 instead
// (attention.cpp, "D with a BF16 out"). So F32 gradients from a BF16 out match the float64
// reference on the same (bf16) inputs to fp32 accuracy, and the key-bias gradient sum_j dk_j,
// exactly 0, stays at fp32 rounding. Handing the kernel the same rounded out as F32 (D from it)
// shows what the rounding would cost: that is the yardstick that proves the check can fail.
void check_bf16_out(const Case& c) {
  SCOPED_TRACE(describe(c));
  Problem p(c);
  p.q = rounded(p.q);
  p.k = rounded(p.k);
  p.v = rounded(p.v);
  p.dout = rounded(p.dout);
  const RefResult ref = reference(p);
  const int64_t Hh = p.H * p.h, Gh = p.G * p.h;
  // max_c |sum_j dk[j, c]| / max |dk|
  auto key_bias_grad = [&](const std::vector<float>& dk) {
    double worst = 0.0, scale = 0.0;
    for (int64_t c = 0; c < Gh; ++c) {
      double sum = 0.0;
      for (int64_t j = 0; j < p.tk; ++j) sum += dk[static_cast<size_t>(j * Gh + c)];
      worst = std::max(worst, std::fabs(sum));
    }
    for (float x : dk) scale = std::max(scale, std::fabs(static_cast<double>(x)));
    return worst / scale;
  };
  for (int threads : {1, 4}) {
    SCOPED_TRACE(threads);
    ThreadCount tc(threads);
    std::vector<uint16_t> o16(static_cast<size_t>(p.n * Hh));
    std::vector<float> lse(static_cast<size_t>(p.n * p.H));
    cpu::attention_forward(bview(o16, p.n, Hh), Problem::view(lse, p.n, p.H), p.qt(), p.kt(),
                           p.vt(), p.segt(), p.q_offset, p.dims(), nullptr);
    auto backward = [&](const Tensor& out) {
      Grads g;
      g.dq.assign(static_cast<size_t>(p.n * Hh), 0.0f);
      g.dk.assign(static_cast<size_t>(p.tk * Gh), 0.0f);
      g.dv.assign(g.dk.size(), 0.0f);
      cpu::attention_backward(Problem::view(g.dq, p.n, Hh), Problem::view(g.dk, p.tk, Gh),
                              Problem::view(g.dv, p.tk, Gh), p.doutt(), p.qt(), p.kt(), p.vt(), out,
                              Problem::view(lse, p.n, p.H), p.segt(), p.q_offset, p.dims(),
                              nullptr);
      return g;
    };
    const Grads exact = backward(bview(o16, p.n, Hh));
    const std::vector<float> o_rounded = widened(o16);
    const Grads from_out = backward(Problem::view(o_rounded, p.n, Hh));
    EXPECT_LT(err(exact.dq, ref.dq), kTol);
    EXPECT_LT(err(exact.dk, ref.dk), kTol);
    EXPECT_LT(err(exact.dv, ref.dv), kTol);
    EXPECT_LT(key_bias_grad(exact.dk), kTol);
    std::printf(
        "[bf16-out] threads %d: dq %.2e dk %.2e, key bias %.2e; with D from the rounded "
        "out: dq %.2e dk %.2e, key bias %.2e\n",
        threads, err(exact.dq, ref.dq), err(exact.dk, ref.dk), key_bias_grad(exact.dk),
        err(from_out.dq, ref.dq), err(from_out.dk, ref.dk), key_bias_grad(from_out.dk));
    EXPECT_GT(key_bias_grad(from_out.dk), 10 * kTol);
  }
}

TEST(Attention, Bf16OutKeepsTheSoftmaxBackwardExact) {
  check_bf16_out(Case{"bf16_out", 4, 2, 24, {100, 3, 90}});
  check_bf16_out(Case{"bf16_out_window", 4, 2, 24, {100, 3, 90}, 0, -1, -1, 50});
}

// ---- key offset (AttentionDims::k_offset): a window's keys only ----

// Kernel forward + backward on keys [k0, tk) only (k_offset = k0), gradients pre-zeroed; dk/dv
// are (tk - k0) rows.
Result run_kernel_offset(const Problem& p, int64_t k0) {
  Result r;
  r.out.assign(static_cast<size_t>(p.n * p.H * p.h), 0.0f);
  r.lse.assign(static_cast<size_t>(p.n * p.H), 0.0f);
  r.g.dq.assign(r.out.size(), 0.0f);
  const int64_t nk = p.tk - k0, Gh = p.G * p.h;
  r.g.dk.assign(static_cast<size_t>(nk * Gh), 0.0f);
  r.g.dv.assign(r.g.dk.size(), 0.0f);
  AttentionDims dims = p.dims();
  dims.k_offset = k0;
  const Tensor k = p.kt().slice_rows(k0, p.tk), v = p.vt().slice_rows(k0, p.tk);
  const Tensor out = Problem::view(r.out, p.n, p.H * p.h);
  const Tensor lse = Problem::view(r.lse, p.n, p.H);
  cpu::attention_forward(out, lse, p.qt(), k, v, p.segt(), p.q_offset, dims, &r.fwd_flops);
  cpu::attention_backward(Problem::view(r.g.dq, p.n, p.H * p.h), Problem::view(r.g.dk, nk, Gh),
                          Problem::view(r.g.dv, nk, Gh), p.doutt(), p.qt(), k, v, out, lse,
                          p.segt(), p.q_offset, dims, &r.bwd_flops);
  return r;
}

// A sliding layer in stream mode (engine/window_stream.h) attends with the keys of the window
// only: rows [k0, tk) with k0 <= q_offset - w + 1. Every output, and dk/dv of those rows, must
// be the bits of the same call on all keys [0, tk) (which the cases above hold against the
// float64 reference), on both backward paths, with the same FLOP count: k0 at the window's
// start (as the engine passes it), below it, on and off key tiles (64), with segments that
// start after k0, GQA and MQA, the window longer and shorter than the chunk.
TEST(Attention, KeyOffsetGivesTheBitsOfAllKeys) {
  struct OffsetCase {
    Case c;
    std::vector<int64_t> k0s;
  };
  const std::vector<OffsetCase> cases = {
      // queries [140, 230), window 50: first key 91
      {{"w50_chunk90", 4, 2, 24, {300}, 140, 90, 230, 50}, {91, 90, 64, 63, 1}},
      // queries [130, 200) over segments [0, 100), [100, 300), window 70: first key 100 (the
      // segment cuts more than the window), offsets up to q_offset - w + 1 = 61
      {{"w70_segment", 4, 2, 16, {100, 200}, 130, 70, 250, 70}, {61, 60, 1}},
      // window longer than the chunk: queries [250, 310), window 200, k0 <= 51
      {{"w200_chunk60_mqa", 4, 1, 8, {360}, 250, 60, 360, 200}, {51, 50, 7}},
      // query block of 128 rows, window 128, keys up to the last query only
      {{"w128_block", 2, 1, 32, {700}, 300, 256, 556, 128}, {173, 128, 129}},
      // one query row, window 1: its own key only
      {{"w1_one_row", 4, 2, 16, {90}, 77, 1, 78, 1}, {77, 76, 64}},
  };
  for (const OffsetCase& oc : cases) {
    const Problem p(oc.c);
    for (int path = 0; path < 2; ++path) {
      ThreadCount tc(path == 0 ? threads_per_kv_head_path(p) : threads_two_pass_path(p));
      const Result all = run_kernel(p);
      for (int64_t k0 : oc.k0s) {
        SCOPED_TRACE(describe(oc.c) + " k0 " + std::to_string(k0) + " path " +
                     std::to_string(path));
        ASSERT_LE(k0, p.q_offset - p.window + 1);
        const Result win = run_kernel_offset(p, k0);
        EXPECT_TRUE(bit_equal(win.out, all.out));
        EXPECT_TRUE(bit_equal(win.lse, all.lse));
        EXPECT_TRUE(bit_equal(win.g.dq, all.g.dq));
        const size_t skip = static_cast<size_t>(k0 * p.G * p.h);
        const std::vector<float> dk_rows(all.g.dk.begin() + static_cast<std::ptrdiff_t>(skip),
                                         all.g.dk.end());
        const std::vector<float> dv_rows(all.g.dv.begin() + static_cast<std::ptrdiff_t>(skip),
                                         all.g.dv.end());
        EXPECT_TRUE(bit_equal(win.g.dk, dk_rows));
        EXPECT_TRUE(bit_equal(win.g.dv, dv_rows));
        EXPECT_EQ(win.fwd_flops, all.fwd_flops);
        EXPECT_EQ(win.bwd_flops, all.bwd_flops);
      }
    }
  }
}

// The kernel refuses an offset that a query row would see past (the Backend's shape check
// allows k0 <= q_offset - w + 1; the kernel also checks the first key with the segment starts).
TEST(Attention, KeyOffsetPastAWindowStartIsRefused) {
  const Problem p(Case{"w10", 2, 1, 8, {60}, 30, 10, 60, 10});
  AttentionDims dims = p.dims();
  std::vector<float> out(static_cast<size_t>(p.n * p.H * p.h)), lse(static_cast<size_t>(p.n * p.H));
  for (int64_t k0 : {int64_t{22}, int64_t{30}}) {  // first key of row 30 is 21
    dims.k_offset = k0;
    EXPECT_THROW(
        cpu::attention_forward(Problem::view(out, p.n, p.H * p.h), Problem::view(lse, p.n, p.H),
                               p.qt(), p.kt().slice_rows(k0, p.tk), p.vt().slice_rows(k0, p.tk),
                               p.segt(), p.q_offset, dims, nullptr),
        Error)
        << k0;
  }
  dims.window = 0;  // no window: every row could see key 0
  dims.k_offset = 5;
  EXPECT_THROW(
      cpu::attention_forward(Problem::view(out, p.n, p.H * p.h), Problem::view(lse, p.n, p.H),
                             p.qt(), p.kt().slice_rows(5, p.tk), p.vt().slice_rows(5, p.tk),
                             p.segt(), p.q_offset, dims, nullptr),
      Error);
}

TEST(VecMath, ExpMatchesStdExp) {
  double worst = 0.0;
  for (double x = -87.3; x <= 88.72; x += 1e-3) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    worst = std::max(worst, std::fabs(cpu::exp_f32(xf) - ref) / ref);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(cpu::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::exp_f32(-100.0f), 0.0f);
  EXPECT_EQ(cpu::exp_f32(-1e30f), 0.0f);
  EXPECT_EQ(cpu::exp_f32(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::exp_f32(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(cpu::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  // In a loop (the vectorized form) it gives the same values as one at a time.
  std::vector<float> xs(1000), ys(1000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = -50.0f + 0.1f * static_cast<float>(i);
  for (size_t i = 0; i < xs.size(); ++i) ys[i] = cpu::exp_f32(xs[i]);
  for (size_t i = 0; i < xs.size(); i += 37) {
    volatile float x = xs[i];
    EXPECT_EQ(ys[i], cpu::exp_f32(x));
  }
}

}  // namespace
}  // namespace sbp
