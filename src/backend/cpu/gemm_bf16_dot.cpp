// GEMM on AVX-512 BF16 dot products (vdpbf16ps: 16 fp32 lanes, each += two bf16 x bf16
// products), fp32 accumulation: the bf16 step's products on CPUs that have the instructions.
//
// Why our own kernel and not a library: OpenBLAS 0.3.21 (Debian 12) exports no sbgemm
// (gemm_bf16.cpp), and oneDNN 2.6 (libdnnl-dev) would be a second threading runtime and a
// primitive per shape for products whose shapes change with every chunk. The kernel is small:
// GotoBLAS blocking (a B block of kKC x kNC in L3, an A block of kMC x kKC in L2, a B strip
// of kKC x kNR in L1) around a kMR x kNR micro-kernel of 24 zmm accumulators.
//
// The inner dimension is the pair axis of vdpbf16ps. Both operands are packed as bf16 pairs
// (op(A)[i][k], op(A)[i][k+1]) and (op(B)[k][j], op(B)[k+1][j]): an A strip as [pair][row]
// 32-bit words, each broadcast to all 16 lanes; a B strip as [pair][column][2], two zmm per
// pair. An odd inner dimension ends with a zero pair.
//
// An F32 operand beside a BF16 one enters as `parts` bf16 parts (gemm_bf16_dot.h): the product
// runs over the inner dimension parts times, K' = parts * K, part p of the F32 operand against
// the BF16 operand each time ([A0 A1 A2] [B; B; B]).
//
// Precision: every product of two bf16 values is exact in fp32; vdpbf16ps adds the two of a
// pair to its fp32 lane (inputs and results below 2^-126 are flushed to zero, as the
// instruction does); a lane sums kKC / 2 pairs, and the block sums are added to C in fp32, in
// K order. The block boundaries depend on K' only, so a row of C has the same bits whatever M,
// N and the thread count are (every tile is summed by one thread).
//
// Scratch per call, on the heap (as gemm_bf16.cpp's): the A block (kMC x kKC bf16, 192 KiB),
// the B block (kKC x kNC bf16, 2 MiB) and, for a BF16 C, its fp32 sums (kMSB x kNC, 4 MiB):
// at most 6.2 MiB whatever T, the vocabulary or the chunk.
//
// Built for x86-64 by GCC or clang (a target attribute scopes the instructions to the
// micro-kernel); elsewhere cpu_has_bf16_dot() is false and every product keeps the
// widened-sgemm path.
// Measured in docs/BENCHMARKS.md, "bf16 arithmetic on AVX-512 BF16 CPUs".
#include "backend/cpu/gemm_bf16_dot.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"
#include "core/dtype.h"
#include "core/error.h"

#if defined(__x86_64__) && defined(__GNUC__)  // GCC and clang
#define SBP_BF16_DOT_BUILT 1
#include <immintrin.h>
#endif

namespace sbp::cpu {

namespace {

constexpr int kMR = 12;        // rows of a micro-tile (broadcast A words)
constexpr int kNR = 32;        // columns of a micro-tile (two zmm of 16 fp32 lanes)
constexpr int64_t kKC = 512;   // inner-dimension block (K' elements; even)
constexpr int64_t kMC = 192;   // rows of an A block (16 strips)
constexpr int64_t kNC = 2048;  // columns of a B block (64 strips)
constexpr int64_t kMSB = 512;  // rows of C summed in an fp32 buffer at a time when C is BF16

// One operand as the packing reads it: element (r, k) of op(A) (r = row i) or of op(B)^T
// (r = column j) is p[r * sr + k * sk].
struct Operand {
  const void* p = nullptr;
  bool bf16 = false;
  int64_t sr = 0, sk = 0;
};

// x rounded to nearest even (part 0), branch-free so that packing loops vectorize; NaN stays
// a quiet NaN, as f32_to_bf16.
inline uint16_t rne_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
inline uint16_t rne_bits(bf16 x) { return x.bits; }

// Bits of part q of the fp32 value x: q = 0 is x rounded to nearest even; q = 1 the rounded
// remainder x - part0 (exact in fp32), and so on.
inline uint16_t part_bits(float x, int q) {
  uint16_t h = rne_bits(x);
  for (int i = 0; i < q; ++i) {
    x -= bf16_to_f32(h);
    h = rne_bits(x);
  }
  return h;
}

// The source index k and part q of each K' position of one block: kk[t] = -1 past the end.
struct KMap {
  int32_t k[kKC];
  int8_t q[kKC];
  int64_t pairs = 0;
  bool contiguous_pairs = false;  // every pair is (k, k+1) of part 0 or a repeat: a word copy
};

void map_block(KMap& m, int64_t k0, int64_t len, int64_t K, bool split) {
  m.pairs = (len + 1) / 2;
  for (int64_t t = 0; t < 2 * m.pairs; ++t) {
    if (t < len) {
      const int64_t kp = k0 + t;
      m.k[t] = static_cast<int32_t>(kp % K);
      m.q[t] = static_cast<int8_t>(split ? kp / K : 0);
    } else {
      m.k[t] = -1;
      m.q[t] = 0;
    }
  }
  m.contiguous_pairs = true;
  for (int64_t p = 0; p < m.pairs; ++p)
    if (m.k[2 * p] < 0 || m.k[2 * p + 1] != m.k[2 * p] + 1 || m.q[2 * p] != m.q[2 * p + 1])
      m.contiguous_pairs = false;
}

// Packs rows [r0, r0 + rows) of `src` over the K' block `m` into strips of R rows:
// dst[strip][pair][R][2], rows past `rows` zero. `split`: src is the F32 operand split in parts.
template <class T, int R>
void pack(uint16_t* dst, const Operand& src, int64_t r0, int64_t rows, const KMap& m,
          bool split) {
  const T* p = static_cast<const T*>(src.p);
  const int64_t strips = (rows + R - 1) / R;
  const int64_t strip_elems = m.pairs * R * 2;
  auto bits = [&](const T& x, int q) -> uint16_t {
    if constexpr (is_bf16<T>) {
      return x.bits;
    } else {
      return part_bits(x, split ? q : 0);
    }
  };
#pragma omp parallel for schedule(static) if (strips * strip_elems > kMinParallelWork)
  for (int64_t s = 0; s < strips; ++s) {
    uint16_t* d = dst + s * strip_elems;
    const int64_t rs = r0 + s * R;
    const int64_t rn = std::min<int64_t>(R, r0 + rows - rs);
    if (rn < R) std::memset(d, 0, static_cast<size_t>(strip_elems) * 2);
    if (src.sk == 1 && m.contiguous_pairs && is_bf16<T>) {
      // Pairs are adjacent in a source row: one 32-bit word each.
      for (int64_t r = 0; r < rn; ++r) {
        const T* row = p + (rs + r) * src.sr;
        for (int64_t pr = 0; pr < m.pairs; ++pr)
          std::memcpy(d + (pr * R + r) * 2, row + m.k[2 * pr], 4);
      }
    } else if (src.sk == 1) {
      for (int64_t r = 0; r < rn; ++r) {
        const T* row = p + (rs + r) * src.sr;
        for (int64_t pr = 0; pr < m.pairs; ++pr)
          for (int e = 0; e < 2; ++e) {
            const int32_t k = m.k[2 * pr + e];
            d[(pr * R + r) * 2 + e] = k < 0 ? uint16_t{0} : bits(row[k], m.q[2 * pr + e]);
          }
      }
    } else {
      // Rows are adjacent in the source (sr == 1 in every call gemm makes): interleave two
      // source lines k, k+1 element by element.
      for (int64_t pr = 0; pr < m.pairs; ++pr) {
        uint16_t* dp = d + pr * R * 2;
        const int32_t k0 = m.k[2 * pr], k1 = m.k[2 * pr + 1];
        if (src.sr == 1 && k0 >= 0 && k1 >= 0 && m.q[2 * pr] == 0 && m.q[2 * pr + 1] == 0) {
          // The common case, one 32-bit word per row, in a loop the compiler vectorizes.
          const T* l0 = p + rs + k0 * src.sk;
          const T* l1 = p + rs + k1 * src.sk;
          uint32_t* dw = reinterpret_cast<uint32_t*>(dp);
          for (int64_t r = 0; r < rn; ++r)
            dw[r] = static_cast<uint32_t>(rne_bits(l0[r])) |
                    (static_cast<uint32_t>(rne_bits(l1[r])) << 16);
          continue;
        }
        for (int e = 0; e < 2; ++e) {
          const int32_t k = m.k[2 * pr + e];
          if (k < 0) {
            for (int64_t r = 0; r < rn; ++r) dp[r * 2 + e] = 0;
            continue;
          }
          const T* line = p + rs * src.sr + k * src.sk;
          const int q = m.q[2 * pr + e];
          for (int64_t r = 0; r < rn; ++r) dp[r * 2 + e] = bits(line[r * src.sr], q);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sbp::cpu

#if defined(SBP_BF16_DOT_BUILT)
namespace sbp::cpu {
namespace {

// tile (kMR, kNR) = sum over `pairs` of the packed A strip a [pair][kMR][2] times the packed B
// strip b [pair][kNR][2], each lane one fp32 chain in pair order.
// Only this function is compiled for AVX-512 BF16 (its target attribute; the rest of the file
// and every header are compiled for the build's own baseline): it runs only where
// cpu_has_bf16_dot() said yes. Not inlined: inlined into the OpenMP body, GCC 12 spilled the
// two B vectors to the stack and reloaded them for every vdpbf16ps (185 against 313 GFLOP/s).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline)) void micro_kernel(
    int64_t pairs, const uint16_t* a, const uint16_t* b, float* tile) {
  __m512 c0[kMR], c1[kMR];
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 32);
#pragma GCC unroll 12
    for (int i = 0; i < kMR; ++i) {
      int32_t w;
      std::memcpy(&w, a + 2 * i, 4);
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(w);
      c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
    }
    a += 2 * kMR;
    b += 2 * kNR;
  }
#pragma GCC unroll 12
  for (int i = 0; i < kMR; ++i) {
    _mm512_storeu_ps(tile + i * kNR, c0[i]);
    _mm512_storeu_ps(tile + i * kNR + 16, c1[i]);
  }
}

}  // namespace
}  // namespace sbp::cpu
#endif

namespace sbp::cpu {
namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
};
template <class T>
std::unique_ptr<T, AlignedFree> aligned_buffer(int64_t n) {
  return std::unique_ptr<T, AlignedFree>(
      static_cast<T*>(::operator new(static_cast<size_t>(n) * sizeof(T), std::align_val_t(64))));
}

Operand operand_a(const Tensor& A, bool trans) {
  const int64_t ld = A.cols();
  return Operand{A.data, A.dtype == DType::BF16, trans ? 1 : ld, trans ? ld : 1};
}
Operand operand_b(const Tensor& B, bool trans) {
  const int64_t ld = B.cols();
  return Operand{B.data, B.dtype == DType::BF16, trans ? ld : 1, trans ? 1 : ld};
}

template <int R>
void pack_any(uint16_t* dst, const Operand& src, int64_t r0, int64_t rows, const KMap& m,
              bool split) {
  if (src.bf16)
    pack<bf16, R>(dst, src, r0, rows, m, false);
  else
    pack<float, R>(dst, src, r0, rows, m, split);
}

bool choose_cpu() {
#if defined(SBP_BF16_DOT_BUILT)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Bf16DotChoice choose() {
  Bf16DotChoice c;
  const char* env = std::getenv("STREAMBP_GEMM_BF16");
  const std::string want = env != nullptr ? env : "dot";
  SBP_CHECK(want == "dot" || want == "dot2" || want == "dot3" || want == "widen",
            "STREAMBP_GEMM_BF16 must be dot, dot2, dot3 or widen, not '" + want + "'");
  c.use = want != "widen" && cpu_has_bf16_dot();
  c.parts = want == "dot2" ? 2 : want == "dot3" ? 3 : 1;
  return c;
}

}  // namespace

bool cpu_has_bf16_dot() {
  static const bool yes = choose_cpu();
  return yes;
}

// Decided once per process: the CPU does not change, and the environment is read at first use.
Bf16DotChoice bf16_dot_choice() {
  static const Bf16DotChoice c = choose();
  return c;
}

const char* gemm_bf16_isa() {
  const Bf16DotChoice c = bf16_dot_choice();
  if (!c.use) return "widen";
  return c.parts == 1 ? "dot" : c.parts == 2 ? "dot2" : "dot3";
}

void gemm_bf16_dot(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                   float alpha, float beta, int parts) {
#if !defined(SBP_BF16_DOT_BUILT)
  (void)C, (void)A, (void)trans_a, (void)B, (void)trans_b, (void)alpha, (void)beta, (void)parts;
  SBP_CHECK(false, "gemm_bf16_dot: not built for this CPU");
#else
  SBP_CHECK(cpu_has_bf16_dot(), "gemm_bf16_dot: this CPU has no AVX-512 BF16");
  // op(A) is (M, K), op(B) (K, N), C (M, N).
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  const bool a16 = A.dtype == DType::BF16, b16 = B.dtype == DType::BF16;
  SBP_CHECK(a16 || b16, "gemm_bf16_dot: A or B must be BF16");
  const bool split = !(a16 && b16);  // one F32 operand, in `parts` parts
  const int P = split ? std::clamp(parts, 1, 3) : 1;
  const int64_t Kp = P * K;  // K': the inner dimension with the parts laid end to end
  const Operand oa = operand_a(A, trans_a), ob = operand_b(B, trans_b);
  const bool c16 = C.dtype == DType::BF16;
  const int64_t MSB = c16 ? std::min(kMSB, M) : M;  // rows per fp32 target
  const int64_t NC = std::min(kNC, N);
  const int64_t ncs = (NC + kNR - 1) / kNR;   // B strips per block
  const int64_t mcs = (kMC + kMR - 1) / kMR;  // A strips per block (at most)

  auto a_pack = aligned_buffer<uint16_t>(mcs * kMR * kKC);
  auto b_pack = aligned_buffer<uint16_t>(ncs * kNR * kKC);
  std::unique_ptr<float, AlignedFree> c_buf;
  if (c16) c_buf = aligned_buffer<float>(MSB * NC);
  KMap km;

  for (int64_t s0 = 0; s0 < M; s0 += MSB) {
    const int64_t s1 = std::min(s0 + MSB, M);
    for (int64_t j0 = 0; j0 < N; j0 += NC) {
      const int64_t jn = std::min(NC, N - j0);
      // The fp32 target of rows [s0, s1) x columns [j0, j0 + jn): C itself, or (BF16 C) a
      // buffer holding C widened (read only when beta != 0).
      float* tgt = nullptr;
      int64_t ldt = 0;
      if (c16) {
        tgt = c_buf.get();
        ldt = jn;
        if (beta != 0.0f) {
          const bf16* pc = float_data<bf16>(C);
#pragma omp parallel for schedule(static) if ((s1 - s0) * jn > kMinParallelWork)
          for (int64_t i = s0; i < s1; ++i)
            for (int64_t j = 0; j < jn; ++j) tgt[(i - s0) * ldt + j] = load(pc[i * N + j0 + j]);
        }
      } else {
        ldt = N;
        tgt = float_data<float>(C) + s0 * ldt + j0;
      }
      for (int64_t k0 = 0; k0 < Kp; k0 += kKC) {
        const int64_t kl = std::min(kKC, Kp - k0);
        const bool first = k0 == 0;
        map_block(km, k0, kl, K, split);
        pack_any<kNR>(b_pack.get(), ob, j0, jn, km, split && !b16);
        const int64_t b_strip = km.pairs * kNR * 2;
        const int64_t a_strip = km.pairs * kMR * 2;
        for (int64_t i0 = s0; i0 < s1; i0 += kMC) {
          const int64_t in = std::min(kMC, s1 - i0);
          pack_any<kMR>(a_pack.get(), oa, i0, in, km, split && !a16);
          const int64_t ms = (in + kMR - 1) / kMR, ns = (jn + kNR - 1) / kNR;
#pragma omp parallel for collapse(2) schedule(static) if (ms * ns > 1)
          for (int64_t js = 0; js < ns; ++js)
            for (int64_t is = 0; is < ms; ++is) {
              alignas(64) float tile[kMR * kNR];
              micro_kernel(km.pairs, a_pack.get() + is * a_strip, b_pack.get() + js * b_strip,
                           tile);
              const int64_t rn = std::min<int64_t>(kMR, in - is * kMR);
              const int64_t cn = std::min<int64_t>(kNR, jn - js * kNR);
              float* t0 = tgt + (i0 - s0 + is * kMR) * ldt + js * kNR;
              for (int64_t r = 0; r < rn; ++r) {
                float* t = t0 + r * ldt;
                const float* a = tile + r * kNR;
                if (!first) {
                  for (int64_t c = 0; c < cn; ++c) t[c] += alpha * a[c];
                } else if (beta == 0.0f) {
                  for (int64_t c = 0; c < cn; ++c) t[c] = alpha * a[c];
                } else {
                  for (int64_t c = 0; c < cn; ++c) t[c] = beta * t[c] + alpha * a[c];
                }
              }
            }
        }
      }
      if (c16) {
        bf16* pc = float_data<bf16>(C);
#pragma omp parallel for schedule(static) if ((s1 - s0) * jn > kMinParallelWork)
        for (int64_t i = s0; i < s1; ++i)
          for (int64_t j = 0; j < jn; ++j) store(pc[i * N + j0 + j], tgt[(i - s0) * ldt + j]);
      }
    }
  }
#endif
}

}  // namespace sbp::cpu
