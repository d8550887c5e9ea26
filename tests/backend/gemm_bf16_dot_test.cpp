// The AVX-512 BF16 GEMM (backend/cpu/gemm_bf16_dot.h) against float64 references: every mix of
// BF16 and F32 operands, transposes, an inner dimension that is odd and crosses the kernel's
// blocks, the F32 operand rounded or split in 2 or 3 parts; a row's bits in products of any row
// count and thread count; beta = 0 over NaN; a BF16 C rounded once. On a CPU without AVX-512
// BF16 the kernel cannot run and these tests skip (the dispatch test still checks the fallback).
#include "backend/cpu/gemm_bf16_dot.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"

namespace sbp {
namespace {

#define SKIP_WITHOUT_BF16_DOT()                                                   \
  if (!cpu::cpu_has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 " \
                                                "(avx512f/bw/vl + avx512_bf16)"

// A matrix in either storage type, with its values as float64 (what the tensor holds exactly).
struct Mat {
  DType dt;
  int64_t rows, cols;
  std::vector<float> f;
  std::vector<uint16_t> b;
  std::vector<double> v;  // the stored values
  Tensor t() {
    return dt == DType::F32 ? Tensor(f.data(), DType::F32, Shape{rows, cols})
                            : Tensor(b.data(), DType::BF16, Shape{rows, cols});
  }
  std::vector<double> read() const {  // current contents as float64
    std::vector<double> out(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = dt == DType::F32 ? static_cast<double>(f[i]) : bf16_to_f32(b[i]);
    return out;
  }
};

Mat make(DType dt, int64_t rows, int64_t cols, Rng& rng, float fill = NAN) {
  Mat m{dt, rows, cols, {}, {}, {}};
  const size_t n = static_cast<size_t>(rows * cols);
  m.v.resize(n);
  if (dt == DType::F32) m.f.resize(n);
  else m.b.resize(n);
  for (size_t i = 0; i < n; ++i) {
    // Full fp32 mantissas (an F32 operand is not bf16-exact), some values large, some small.
    const float x = std::isnan(fill) ? static_cast<float>(rng.normal()) *
                                           (i % 7 == 0 ? 8.0f : 1.0f)
                                     : fill;
    if (dt == DType::F32) {
      m.f[i] = x;
      m.v[i] = x;
    } else {
      m.b[i] = f32_to_bf16(x);
      m.v[i] = bf16_to_f32(m.b[i]);
    }
  }
  return m;
}

// Part q of x as the kernel takes it: q = 0 rounded to nearest even, then the rounded remainders.
double part(float x, int q) {
  uint16_t h = f32_to_bf16(x);
  for (int i = 0; i < q; ++i) {
    x -= bf16_to_f32(h);
    h = f32_to_bf16(x);
  }
  return bf16_to_f32(h);
}
// x as the sum of its first `parts` bf16 parts (float64: the sum is exact).
double in_parts(float x, int parts) {
  double s = 0;
  for (int q = 0; q < parts; ++q) s += part(x, q);
  return s;
}

struct Dims {
  int64_t M, N, K;
};

// Shapes: K odd and over the kernel's inner block (512) twice; M and N off the micro-tile
// (12 x 32) and over the row (192) and column (2048) blocks; one tiny product.
const Dims kShapes[] = {{37, 45, 1031}, {201, 2050, 40}, {5, 3, 1}};

TEST(GemmBf16Dot, MatchesFloat64ForEveryDtypeTransposeAndPartCount) {
  SKIP_WITHOUT_BF16_DOT();
  Rng rng(11);
  // (C, A, B) dtypes with A or B in BF16.
  const DType F = DType::F32, H = DType::BF16;
  const DType combos[][3] = {{F, H, H}, {H, H, H}, {F, F, H}, {F, H, F}, {H, F, H}, {H, H, F}};
  for (const Dims& d : kShapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (const auto& dts : combos)
          for (int parts = 1; parts <= 3; ++parts) {
            const bool split = dts[1] != dts[2];
            if (!split && parts > 1) continue;
            SCOPED_TRACE(::testing::Message()
                         << "M " << d.M << " N " << d.N << " K " << d.K << " ta " << ta << " tb "
                         << tb << " C A B " << dtype_name(dts[0]) << " " << dtype_name(dts[1])
                         << " " << dtype_name(dts[2]) << " parts " << parts);
            Mat A = ta ? make(dts[1], d.K, d.M, rng) : make(dts[1], d.M, d.K, rng);
            Mat B = tb ? make(dts[2], d.N, d.K, rng) : make(dts[2], d.K, d.N, rng);
            Mat C = make(dts[0], d.M, d.N, rng);
            const std::vector<double> c0 = C.read();
            const float alpha = 0.75f, beta = -0.5f;
            cpu::gemm_bf16_dot(C.t(), A.t(), ta, B.t(), tb, alpha, beta, parts);
            const std::vector<double> got = C.read();
            // Per element: `seen` = the product of the values the kernel multiplies (the F32
            // operand in its parts), `exact` = of the stored values, `mag` = sum of |a b|.
            // seen: fp32 sums of K' = parts * K exact products, at most (K' + 2) u of mag, plus
            // alpha/beta and the add to C; exact: each part sum is within 2^(-8 parts) of the
            // fp32 value (a rounding to bf16, 8 significant bits, is within 2^-8 relative, and
            // each further part rounds the remainder). A BF16 C adds one rounding, 2^-8 of the
            // result.
            const double u = std::ldexp(1.0, -24);
            const double split_err = split ? std::ldexp(1.0, -8 * parts) : 0.0;
            int bad = 0;
            for (int64_t i = 0; i < d.M && bad < 5; ++i)
              for (int64_t j = 0; j < d.N && bad < 5; ++j) {
                double seen = 0, exact = 0, mag = 0;
                for (int64_t k = 0; k < d.K; ++k) {
                  const size_t ia = static_cast<size_t>(ta ? k * d.M + i : i * d.K + k);
                  const size_t ib = static_cast<size_t>(tb ? j * d.K + k : k * d.N + j);
                  const double a = A.v[ia], b = B.v[ib];
                  const double as = A.dt == F ? in_parts(A.f[ia], parts) : a;
                  const double bs = B.dt == F ? in_parts(B.f[ib], parts) : b;
                  seen += as * bs;
                  exact += a * b;
                  mag += std::fabs(a * b);
                }
                const size_t ic = static_cast<size_t>(i * d.N + j);
                const double want_seen = alpha * seen + beta * c0[ic];
                const double want_exact = alpha * exact + beta * c0[ic];
                const double scale = std::fabs(alpha) * mag + std::fabs(beta * c0[ic]);
                const double out_round = C.dt == H ? std::ldexp(1.0, -8) * std::fabs(want_seen) : 0;
                const double tol_seen =
                    static_cast<double>(parts * d.K + 4) * u * scale * 1.01 + out_round;
                const double tol_exact = tol_seen + split_err * std::fabs(alpha) * mag * 1.01;
                if (std::fabs(got[ic] - want_seen) > tol_seen ||
                    std::fabs(got[ic] - want_exact) > tol_exact) {
                  ++bad;
                  ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got[ic] << ", float64 "
                                << want_seen << " (of the parts), " << want_exact
                                << " (of the stored values); bounds " << tol_seen << ", "
                                << tol_exact;
                }
              }
          }
}

// A row of C is summed in an order fixed by K alone: the same bits inside a product of any row
// count (the chunks of a streamed layer) and on any thread count.
TEST(GemmBf16Dot, ARowHasTheSameBitsInAnyRowCountAndThreadCount) {
  SKIP_WITHOUT_BF16_DOT();
  Rng rng(5);
  const int64_t M = 431, N = 300, K = 1100;
  for (int parts = 1; parts <= 2; ++parts) {
    Mat A = make(DType::F32, M, K, rng), B = make(DType::BF16, N, K, rng);
    Mat whole = make(DType::F32, M, N, rng, 0.0f);
    cpu::gemm_bf16_dot(whole.t(), A.t(), false, B.t(), true, 1.0f, 0.0f, parts);
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{100}, int64_t{193}}) {
      Mat part_c = make(DType::F32, M, N, rng, 0.0f);
      for (int64_t s = 0; s < M; s += chunk) {
        const int64_t e = std::min(M, s + chunk);
        const Tensor a = A.t().slice_rows(s, e), c = part_c.t().slice_rows(s, e);
        cpu::gemm_bf16_dot(c, a, false, B.t(), true, 1.0f, 0.0f, parts);
      }
      EXPECT_EQ(0, std::memcmp(whole.f.data(), part_c.f.data(), whole.f.size() * 4))
          << "chunk " << chunk << " parts " << parts;
    }
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    Mat one = make(DType::F32, M, N, rng, 0.0f);
    cpu::gemm_bf16_dot(one.t(), A.t(), false, B.t(), true, 1.0f, 0.0f, parts);
    omp_set_num_threads(threads);
    EXPECT_EQ(0, std::memcmp(whole.f.data(), one.f.data(), whole.f.size() * 4))
        << "1 thread against " << threads;
  }
}

// beta = 0 writes C without reading it (NaN in C does not propagate), as BLAS does.
TEST(GemmBf16Dot, BetaZeroOverwritesNaN) {
  SKIP_WITHOUT_BF16_DOT();
  Rng rng(3);
  for (DType dc : {DType::F32, DType::BF16}) {
    Mat A = make(DType::BF16, 30, 70, rng), B = make(DType::BF16, 70, 50, rng);
    Mat C = make(dc, 30, 50, rng, NAN);
    for (float& x : C.f) x = NAN;
    for (uint16_t& x : C.b) x = 0x7fc0;
    cpu::gemm_bf16_dot(C.t(), A.t(), false, B.t(), false, 1.0f, 0.0f, 1);
    for (double x : C.read()) ASSERT_FALSE(std::isnan(x)) << dtype_name(dc);
  }
}

// A BF16 C is summed in fp32 over the whole inner dimension and rounded once: 2048 terms of
// 2^-18 add one bf16 ulp of 1 (2^-7); a rounding per inner block (512 terms, 2^-9, under half
// an ulp) would lose them.
TEST(GemmBf16Dot, Bf16CIsRoundedOncePerCall) {
  SKIP_WITHOUT_BF16_DOT();
  const int64_t K = 2048;
  Rng rng(1);
  Mat A = make(DType::BF16, 1, K, rng, 1.0f);
  Mat B = make(DType::BF16, K, 1, rng, static_cast<float>(std::ldexp(1.0, -18)));
  Mat C = make(DType::BF16, 1, 1, rng, 1.0f);
  cpu::gemm_bf16_dot(C.t(), A.t(), false, B.t(), false, 1.0f, 1.0f, 1);
  EXPECT_EQ(C.read()[0], 1.0 + std::ldexp(1.0, -7));
}

// The run-time choice: without AVX-512 BF16 every product keeps the widened-sgemm path.
TEST(GemmBf16Dot, DispatchFallsBackWhereTheCpuLacksBf16) {
  const std::string isa = cpu::gemm_bf16_isa();
  if (!cpu::cpu_has_bf16_dot()) {
    EXPECT_EQ(isa, "widen");
    EXPECT_FALSE(cpu::bf16_dot_choice().use);
  } else {
    EXPECT_TRUE(isa == "dot" || isa == "dot2" || isa == "dot3" || isa == "widen") << isa;
  }
}

}  // namespace
}  // namespace sbp
