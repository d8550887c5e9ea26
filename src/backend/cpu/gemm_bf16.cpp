// GEMM with BF16 operands: BF16 panels widened to fp32, multiplied by OpenBLAS sgemm; on a CPU
// with AVX-512 BF16 a call with a BF16 A or B goes to bf16 dot products instead
// (gemm_bf16_dot.cpp, 2.5-3.4x this path there: docs/BENCHMARKS.md).
//
// Why not OpenBLAS's cblas_sbgemm (bf16 A and B, fp32 C): Debian 12's OpenBLAS 0.3.21 declares
// it in cblas.h but is built without it (no such symbol in libopenblas), so it cannot be
// measured or used here; it would also cover only calls whose A and B are both BF16 (an F32
// gradient would have to be rounded to bf16 first, which the contract forbids). Widening costs
// 8% against fp32 sgemm (median) on the shapes of a real model. `build/tools/bench/gemm_bench
// --reps 5` (qwen3-0.6b's 39 layer, gradient and LM-head products at 256, 1024 and 4096 rows; 2
// threads, AMD EPYC, median of 5 interleaved runs): mixed/fp32 GFLOP/s median 0.92, range
// 0.84 .. 1.03 (the LM head's 512 x 151936 x 1024 products 0.92 .. 0.94). A hand-written bf16
// kernel would have to beat OpenBLAS's fp32 kernel by more than that to pay for itself; the
// widening is bandwidth on panels that sgemm then reuses ~1000 times.
//
// The product is cut into blocks so that the fp32 copies stay bounded whatever the shapes:
// C in tiles of (kMB, kNB), the inner dimension in steps of kKB. Only the dimensions that some
// BF16 operand spans are cut (a BF16 A spans M and K, B spans K and N, C spans M and N): an F32
// operand is handed to sgemm in place. A BF16 A is widened once per column block of C, a BF16 B
// once per row block: at most 1/(2 kNB) + 1/(2 kMB) conversions per flop (0.1%), and once in
// all when its block spans the whole inner dimension within its scratch (see a_once, b_once).
//
// Scratch, allocated per call and freed on return, at most
//   A panel kMB x kKB + B panel kKB x kNB + C tile kMB x kNB floats = 2 Mi floats = 8 MiB,
// less when an operand is F32 or a dimension is smaller than its block; nothing depends on T,
// on the vocabulary or on any other dimension beyond its block.
//
// Precision: every product term and every sum is fp32 (sgemm's); BF16 is read exactly (a
// widening is exact) and a BF16 C is rounded to nearest even once per element and call: its
// fp32 tile takes beta * C and alpha A B over all K steps, and is stored once.
// Determinism: the blocks are a function of the shapes only, and sgemm is deterministic for a
// given thread count, so the same inputs and thread count give the same bits.
#include "backend/cpu/gemm_bf16.h"

#include <algorithm>
#include <memory>

#include "backend/cpu/blas.h"
#include "backend/cpu/gemm_bf16_dot.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp::cpu {
namespace {

constexpr int64_t kMB = 1024;  // rows of a C tile (and of an A panel)
constexpr int64_t kNB = 1024;  // columns of a C tile (and of a B panel)
constexpr int64_t kKB = 512;   // inner-dimension step

// A matrix operand as sgemm takes it: data and leading dimension.
struct Panel {
  const float* p = nullptr;
  int64_t ld = 0;
};

// dst (r1 - r0, c1 - c0), row stride c1 - c0 = rows [r0, r1) and columns [c0, c1) of the BF16
// matrix src with row stride ld, widened to fp32.
void widen_block(float* dst, const bf16* src, int64_t ld, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1) {
  const int64_t w = c1 - c0;
#pragma omp parallel for schedule(static) if ((r1 - r0) * w > kMinParallelWork)
  for (int64_t r = r0; r < r1; ++r) {
    const bf16* s = src + r * ld + c0;
    float* d = dst + (r - r0) * w;
    for (int64_t j = 0; j < w; ++j) d[j] = load(s[j]);
  }
}

// The block of rows [r0, r1), columns [c0, c1) of the stored matrix t (F32: in place; BF16:
// widened into scratch).
Panel block_of(const Tensor& t, float* scratch, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t ld = t.cols();
  if (t.dtype == DType::F32) return Panel{float_data<float>(t) + r0 * ld + c0, ld};
  widen_block(scratch, float_data<bf16>(t), ld, r0, r1, c0, c1);
  return Panel{scratch, c1 - c0};
}

std::unique_ptr<float[]> scratch_if(bool needed, int64_t floats) {
  return needed ? std::make_unique_for_overwrite<float[]>(static_cast<size_t>(floats)) : nullptr;
}

}  // namespace

void gemm_mixed(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                float alpha, float beta) {
  // op(A) is (M, K), op(B) (K, N), C (M, N); A stored (M, K) or, transposed, (K, M).
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  const bool a16 = A.dtype == DType::BF16, b16 = B.dtype == DType::BF16;
  const bool c16 = C.dtype == DType::BF16;
  // On a CPU with AVX-512 BF16, a product with a BF16 operand runs on bf16 dot products
  // (gemm_bf16_dot.h), at any row count: a row then has the same bits in a chunk of any length,
  // as the exactness tests compare chunked modes with whole products.
  const Bf16DotChoice dot = bf16_dot_choice();
  if (dot.use && (a16 || b16)) {
    gemm_bf16_dot(C, A, trans_a, B, trans_b, alpha, beta, dot.parts);
    return;
  }
  // Cut only the dimensions that a BF16 operand spans (see the top of the file).
  const int64_t MB = (a16 || c16) ? std::min(kMB, M) : M;
  const int64_t NB = (b16 || c16) ? std::min(kNB, N) : N;
  const int64_t KB = (a16 || b16) ? std::min(kKB, K) : K;
  // A BF16 operand that would be widened again for every tile along the other dimension, and
  // whose block spans the whole of K within its scratch (kMB x kKB or kKB x kNB floats: the LM
  // head's (512, d) hidden rows, on either side), is widened once per row block of C (A) or
  // column block (B, the column blocks then being the outer loop).
  const bool a_once = a16 && N > NB && MB * K <= kMB * kKB;
  const bool b_once = b16 && !a_once && M > MB && K * NB <= kKB * kNB;
  std::unique_ptr<float[]> a_buf = scratch_if(a16, a_once ? MB * K : MB * KB);
  std::unique_ptr<float[]> b_buf = scratch_if(b16, b_once ? K * NB : KB * NB);
  std::unique_ptr<float[]> c_buf = scratch_if(c16, MB * NB);  // (MB, NB)
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;

  // op(A) rows [i0, i1) x columns [k0, k1) and op(B) rows [k0, k1) x columns [j0, j1) as sgemm
  // takes them: in place (F32), from the once-widened block (a_once, b_once), or widened now.
  auto a_block = [&](int64_t i0, int64_t i1, int64_t k0, int64_t k1) {
    if (a_once)
      return trans_a ? Panel{a_buf.get() + k0 * (i1 - i0), i1 - i0} : Panel{a_buf.get() + k0, K};
    return trans_a ? block_of(A, a_buf.get(), k0, k1, i0, i1)
                   : block_of(A, a_buf.get(), i0, i1, k0, k1);
  };
  auto b_block = [&](int64_t k0, int64_t k1, int64_t j0, int64_t j1) {
    if (b_once)
      return trans_b ? Panel{b_buf.get() + k0, K} : Panel{b_buf.get() + k0 * (j1 - j0), j1 - j0};
    return trans_b ? block_of(B, b_buf.get(), j0, j1, k0, k1)
                   : block_of(B, b_buf.get(), k0, k1, j0, j1);
  };

  // One tile of C: rows [i0, i1), columns [j0, j1), over all of K.
  auto tile = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    // The C tile: in place (F32), or fp32 scratch holding C widened (BF16; not read when
    // beta = 0, as BLAS does not read C then). sgemm applies beta on the first K step.
    float* c = nullptr;
    int64_t ldc = 0;
    if (c16) {
      c = c_buf.get();
      ldc = j1 - j0;
      if (beta != 0.0f) widen_block(c, float_data<bf16>(C), N, i0, i1, j0, j1);
    } else {
      ldc = N;
      c = float_data<float>(C) + i0 * ldc + j0;
    }
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      const int64_t k1 = std::min(k0 + KB, K);
      const Panel a = a_block(i0, i1, k0, k1), b = b_block(k0, k1, j0, j1);
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(i1 - i0), static_cast<int>(j1 - j0),
                  static_cast<int>(k1 - k0), alpha, a.p, static_cast<int>(a.ld), b.p,
                  static_cast<int>(b.ld), k0 == 0 ? beta : 1.0f, c, static_cast<int>(ldc));
    }
    if (c16) {
      bf16* pc = float_data<bf16>(C);
#pragma omp parallel for schedule(static) if ((i1 - i0) * ldc > kMinParallelWork)
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) store(pc[i * N + j], c[(i - i0) * ldc + (j - j0)]);
    }
  };

  if (b_once) {  // column blocks outside: each B block is widened once
    for (int64_t j0 = 0; j0 < N; j0 += NB) {
      const int64_t j1 = std::min(j0 + NB, N);
      trans_b ? block_of(B, b_buf.get(), j0, j1, 0, K) : block_of(B, b_buf.get(), 0, K, j0, j1);
      for (int64_t i0 = 0; i0 < M; i0 += MB) tile(i0, std::min(i0 + MB, M), j0, j1);
    }
  } else {  // row blocks outside: with a_once, each A block is widened once
    for (int64_t i0 = 0; i0 < M; i0 += MB) {
      const int64_t i1 = std::min(i0 + MB, M);
      if (a_once)
        trans_a ? block_of(A, a_buf.get(), 0, K, i0, i1) : block_of(A, a_buf.get(), i0, i1, 0, K);
      for (int64_t j0 = 0; j0 < N; j0 += NB) tile(i0, i1, j0, std::min(j0 + NB, N));
    }
  }
}

}  // namespace sbp::cpu
