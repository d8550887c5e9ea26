// The CUDA backend's GEMM plan (src/backend/cuda/gemm_plan.h, gemm_split.h) on the CPU: which
// cuBLASLt calls each dtype mix becomes, that an fp32 operand's bf16 parts hold all its bits,
// that running a plan's calls as cuBLASLt would (bf16 products exact, fp32 accumulation, beta on
// the first call, a BF16 C rounded once) is at least as accurate as the fp32 GEMM the CPU
// backend computes, and that the conversion scratch is recorded in the ledger by every backend
// alike (so a plan on the meta backend counts what a GPU step holds).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cuda/gemm_describe.h"
#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/gemm_split.h"
#include "backend/gemm_scratch.h"
#include "backend/meta/meta_backend.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "support/test_support.h"

namespace sbp::cuda {
namespace {

constexpr DType F = DType::F32, H = DType::BF16;

TEST(CudaGemmPlan, EveryMixWithABf16OperandRunsOnTensorCores) {
  struct Row {
    DType a, b, c;
    SplitOperand split;
    bool bf16_operands, widen_c, c_bf16;
  };
  const Row rows[] = {
      // both BF16: one tensor-core call, C as it is
      {H, H, F, SplitOperand::none, true, false, false},
      {H, H, H, SplitOperand::none, true, false, true},
      // one F32: that one split, a call per part; a BF16 C accumulated in fp32, rounded once
      {F, H, F, SplitOperand::a, true, false, false},
      {H, F, F, SplitOperand::b, true, false, false},
      {F, H, H, SplitOperand::a, true, true, false},
      {H, F, H, SplitOperand::b, true, true, false},
      // both F32: the fp32 reference precision; cuBLASLt cannot write BF16 from it
      {F, F, F, SplitOperand::none, false, false, false},
      {F, F, H, SplitOperand::none, false, true, false},
  };
  for (const Row& r : rows) {
    const GemmPlan p = plan_gemm(r.a, r.b, r.c, 6, 10, 15);
    SCOPED_TRACE(std::string(dtype_name(r.a)) + " x " + dtype_name(r.b) + " -> " +
                 dtype_name(r.c));
    EXPECT_EQ(p.split, r.split);
    EXPECT_EQ(p.calls, r.split == SplitOperand::none ? 1 : kGemmSplitParts);
    EXPECT_EQ(p.operands_bf16, r.bf16_operands);
    EXPECT_EQ(p.widen_c, r.widen_c);
    EXPECT_EQ(p.c_bf16, r.c_bf16);
    // Scratch: 256-byte aligned parts of the split operand, then the fp32 C.
    const int64_t split_numel = r.split == SplitOperand::a ? 6 : r.split == SplitOperand::b ? 10 : 0;
    EXPECT_EQ(p.scratch.part_stride, split_numel > 0 ? 256 : 0);
    EXPECT_EQ(p.scratch.c_bytes, r.widen_c ? 15 * 4 : 0);
    EXPECT_EQ(p.scratch.total(), gemm_scratch(r.c, r.a, r.b, 15, 6, 10).total());
  }
  // Calls: lo part first, beta only on the first.
  const GemmPlan p = plan_gemm(F, H, F, 1, 1, 1);
  for (int i = 0; i < p.calls; ++i) EXPECT_EQ(part_of_call(p, i), p.calls - 1 - i);
  EXPECT_EQ(beta_of_call(0.5f, 0), 0.5f);
  EXPECT_EQ(beta_of_call(0.5f, 1), 1.0f);
  EXPECT_EQ(beta_of_call(0.0f, 2), 1.0f);
}

TEST(CudaGemmPlan, ScratchPartsAreAligned) {
  const GemmScratch s = gemm_scratch(H, F, H, 1000, 513, 7);  // 513 bf16 = 1026 B per part
  EXPECT_EQ(s.part_stride, 1280);
  EXPECT_EQ(s.c_offset(), 3 * 1280);
  EXPECT_EQ(s.total(), 3 * 1280 + 4000);
  EXPECT_EQ(gemm_scratch(F, H, H, 9, 9, 9).total(), 0);
  EXPECT_EQ(gemm_scratch(F, F, F, 9, 9, 9).total(), 0);
}

double part_sum(const Bf16Parts& s, int parts) {
  double v = 0.0;
  for (int i = 0; i < parts; ++i) v += static_cast<double>(bf16_to_float(s.p[i]));
  return v;
}

TEST(CudaGemmPlan, ThreeBf16PartsHoldEveryBitOfAnFp32Value) {
  Rng rng(27);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    // Magnitudes 1e-20 .. 1e30. Below ~2^-102 the lowest part would be an fp32 subnormal and
    // lose bits (gemm_split.h): no gradient of a real step is that small.
    const float x = static_cast<float>(rng.normal() * std::pow(10.0, (i % 51) - 20));
    if (std::fabs(x) < 0x1p-100f) continue;
    const Bf16Parts s = split_bf16(x);
    ASSERT_EQ(part_sum(s, kSplitParts), static_cast<double>(x)) << x;
    // Each part is the nearest bf16 of what the parts before it leave.
    EXPECT_EQ(s.p[0], f32_to_bf16(x));
    // Two parts would keep 16 bits: error up to 2^-16 |x| (what split2 in gemm_accuracy is).
    EXPECT_LE(std::fabs(part_sum(s, 2) - x), std::ldexp(std::fabs(static_cast<double>(x)), -16));
    ++checked;
  }
  EXPECT_GT(checked, 199000);
  for (float x : {0.0f, -0.0f, 1.0f, -3.0e38f, 1.17549435e-38f})
    EXPECT_EQ(part_sum(split_bf16(x), kSplitParts), static_cast<double>(x)) << x;
  EXPECT_TRUE(std::isnan(bf16_to_float(split_bf16(NAN).p[0])));
  EXPECT_TRUE(std::isinf(bf16_to_float(split_bf16(INFINITY).p[0])));
}

// C (M, N) row-major, fp32, as one cuBLASLt call computes it: C = alpha * sum_k a b + beta * C,
// the sum an fp32 FMA chain (bf16 x bf16 products are exact in fp32, so a tensor core's sum
// differs only in the order of its fp32 additions).
void lt_call(std::vector<float>& C, const std::vector<float>& A, const std::vector<float>& B,
             int64_t M, int64_t N, int64_t K, float alpha, float beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(A[i * K + k], B[k * N + j], acc);
      float& c = C[i * N + j];
      c = beta == 0.0f ? alpha * acc : std::fma(alpha, acc, beta * c);
    }
}

float round_bf16(float x) { return bf16_to_float(f32_to_bf16(x)); }

// The plan's calls, as gemm.cu makes them, on host vectors (values already in their dtype).
std::vector<float> run_plan(DType ta, DType tb, DType tc, const std::vector<float>& A,
                            const std::vector<float>& B, std::vector<float> C, int64_t M,
                            int64_t N, int64_t K, float alpha, float beta) {
  const GemmPlan p = plan_gemm(ta, tb, tc, M * K, K * N, M * N);
  std::vector<std::vector<float>> parts;
  const std::vector<float>* split = p.split == SplitOperand::a   ? &A
                                    : p.split == SplitOperand::b ? &B
                                                                 : nullptr;
  if (split) {
    parts.assign(kSplitParts, std::vector<float>(split->size()));
    for (size_t e = 0; e < split->size(); ++e) {
      const Bf16Parts s = split_bf16((*split)[e]);
      for (int q = 0; q < kSplitParts; ++q) parts[static_cast<size_t>(q)][e] = bf16_to_float(s.p[q]);
    }
  }
  // C's fp32 accumulator: C itself (F32), the widened scratch, or cuBLASLt's own (c_bf16).
  for (int i = 0; i < p.calls; ++i) {
    const std::vector<float>& a = p.split == SplitOperand::a ? parts[static_cast<size_t>(part_of_call(p, i))] : A;
    const std::vector<float>& b = p.split == SplitOperand::b ? parts[static_cast<size_t>(part_of_call(p, i))] : B;
    lt_call(C, a, b, M, N, K, alpha, beta_of_call(beta, i));
    if (p.c_bf16)
      for (float& c : C) c = round_bf16(c);  // cuBLASLt writes a BF16 D once per call
  }
  if (p.widen_c)
    for (float& c : C) c = round_bf16(c);  // narrowed back once
  return C;
}

TEST(CudaGemmPlan, SplitProductsAreAsAccurateAsTheFp32Gemm) {
  Rng rng(5);
  const int64_t M = 7, N = 9, K = 300;
  const float alpha = 0.75f, beta = 0.5f;
  for (DType ta : {F, H})
    for (DType tb : {F, H})
      for (DType tc : {F, H}) {
        SCOPED_TRACE(std::string(dtype_name(ta)) + " x " + dtype_name(tb) + " -> " +
                     dtype_name(tc));
        auto draw = [&](int64_t n, DType t, double scale) {
          std::vector<float> v(static_cast<size_t>(n));
          for (float& x : v) {
            x = static_cast<float>(scale * rng.normal());
            if (t == H) x = round_bf16(x);
          }
          return v;
        };
        const std::vector<float> A = draw(M * K, ta, 1e-3), B = draw(K * N, tb, 0.02);
        const std::vector<float> C0 = draw(M * N, tc, 1e-4);
        // float64 reference and the fp32 GEMM (the CPU backend's: exact operands, fp32 sums).
        std::vector<double> ref(static_cast<size_t>(M * N));
        std::vector<float> fp32 = C0;
        lt_call(fp32, A, B, M, N, K, alpha, beta);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0.0;
            for (int64_t k = 0; k < K; ++k)
              s += static_cast<double>(A[i * K + k]) * static_cast<double>(B[k * N + j]);
            ref[i * N + j] = alpha * s + beta * static_cast<double>(C0[i * N + j]);
          }
        if (tc == H)
          for (float& c : fp32) c = round_bf16(c);
        const std::vector<float> got = run_plan(ta, tb, tc, A, B, C0, M, N, K, alpha, beta);
        const double e_plan = test::rel_err_f64(got, ref), e_fp32 = test::rel_err_f64(fp32, ref);
        // A BF16 C is the bf16 of the same fp32 value: equal unless a tie of rounding differs.
        const double bound = tc == H ? std::ldexp(1.0, -8) : 1.5 * e_fp32 + 1e-12;
        EXPECT_LE(e_plan, bound) << "fp32 path " << e_fp32;
      }
}

// Backend::gemm takes the scratch from the lent pool on every backend: the meta backend (what
// `plan` runs) records in its ledger what the CUDA backend holds during the call, and the CPU
// backend records the same bytes, so a CPU step's ledger equals its plan.
TEST(CudaGemmPlan, ConversionScratchIsRecordedInTheLentPoolsLedger) {
  for (bool meta : {true, false}) {
    SCOPED_TRACE(meta ? "meta" : "cpu");
    Ledger ledger;
    MetaBackend shapes;
    const std::unique_ptr<Backend> cpu = test::backend();
    Backend& be = meta ? static_cast<Backend&>(shapes) : *cpu;
    Pool pool(ledger, be);
    const int64_t n = 40, out = 24, in = 16;
    Buffer dy = pool.zeros(Category::grad_buffers, F, {n, out});  // (n, out)
    Buffer W = pool.zeros(Category::weights, H, {out, in});       // (out, in)
    Buffer dx = pool.zeros(Category::grad_buffers, F, {n, in});   // (n, in)
    Buffer y = pool.zeros(Category::grad_buffers, H, {n, out});   // (n, out)
    Buffer sq = pool.zeros(Category::grad_buffers, F, {n, n});    // (n, n)
    const int64_t before = ledger.live();
    ledger.reset_peak();
    {
      const Backend::ScratchLoan loan(be, pool);
      be.gemm(dx.view(), dy.view(), false, W.view(), false, 1.0f, 0.0f);  // split dy
    }
    EXPECT_EQ(ledger.live(), before);  // held for the call only
    EXPECT_EQ(ledger.peak() - before, gemm_scratch(F, F, H, n * in, n * out, out * in).total());
    EXPECT_EQ(ledger.peak() - before, 3 * gemm_scratch_round(n * out * 2));
    // A BF16 C of a split product: the parts and an fp32 C.
    ledger.reset_peak();
    {
      const Backend::ScratchLoan loan(be, pool);
      be.gemm(y.view(), dx.view(), false, W.view(), true, 1.0f, 1.0f);  // (n, out) += dx W^T
    }
    EXPECT_EQ(ledger.peak() - before, 3 * gemm_scratch_round(n * in * 2) + n * out * 4);
    // No loan: the backend's own pool, nothing in this ledger.
    ledger.reset_peak();
    be.gemm(dx.view(), dy.view(), false, W.view(), false, 1.0f, 0.0f);
    EXPECT_EQ(ledger.peak(), before);
    // Both BF16, or both F32: no scratch.
    ledger.reset_peak();
    {
      const Backend::ScratchLoan loan(be, pool);
      be.gemm(sq.view(), y.view(), false, y.view(), true, 1.0f, 0.0f);    // (n, n) = y y^T
      be.gemm(sq.view(), dy.view(), false, dy.view(), true, 1.0f, 1.0f);  // += dy dy^T
    }
    EXPECT_EQ(ledger.peak(), before);
  }
}

// A refused gemm is named (gemm_describe.h): the shape as stored and after op(), the types,
// whether C is read, the leading dimensions and the alignments; cuBLAS's status by its name.
TEST(CudaGemmDescribe, NamesTheCallSoARefusalSaysWhichOne) {
  GemmCall g;
  g.M = 512;
  g.N = 1;
  g.K = 4;
  g.ab_type = "BF16";
  g.c_type = "F32";
  g.trans_a = true;
  g.lda = 512;
  g.ldb = 1;
  g.ldc = 1;
  g.align_a = 256;
  g.align_b = 2;
  g.align_c = 4;
  g.beta = true;
  EXPECT_EQ(describe(g),
            "C (512, 1) F32 = A^T, A (4, 512) BF16 x B (4, 1) BF16, M = 512, N = 1, K = 4, "
            "beta != 0 (C read); row-major leading dimensions lda 512, ldb 1, ldc 1; alignments "
            "A 256, B 2, C 4 bytes");
  EXPECT_EQ(cublas_status_name(15), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_EQ(cublas_status_name(99), "cuBLAS status 99");
}

}  // namespace
}  // namespace sbp::cuda
