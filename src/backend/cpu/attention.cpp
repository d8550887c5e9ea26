// Flash-style attention on the CPU (fp32 arithmetic), forward and backward.
//
// Work is cut into query blocks of kBq rows and key tiles of kBk keys. Key tiles sit at
// absolute multiples of kBk (not relative to the query chunk) and each tile is trimmed to the
// keys the block can see, so the arithmetic a query row goes through does not depend on which
// other rows share its block: a forward over row chunks [s, e) with q_offset = s gives the same
// bits as one forward over all rows. Masked scores contribute exact zeros (p = 0), which is why
// trimming and skipping never change a result. A key offset k0 (AttentionDims::k_offset: k
// holds global rows [k0, k0 + Tk)) moves only the addresses: tiles stay at global multiples of
// kBk and are trimmed at k0 like at any first key, so a call on a window's keys gives the bits
// of the same call on all keys.
//
// Every tile product is one small GEMM, C (M, N) (=, +=, or row-scaled +=) A (M, K) B (K, N),
// done by a register-blocked micro-kernel (kMR rows x 16 columns held in 12 AVX registers, or
// with AVX-512 8 rows x 32 columns in 16 registers: enough independent FMA chains to keep both
// FMA units busy) written with GCC vector types (portable; the one target builtin is the FMA). B is read
// as contiguous rows; A is read by broadcasts through arbitrary row/column strides, which lets
// one kernel serve P V, P^T dO and dS^T Q without transposing P or dS.
//
// Scores are computed key-major, S^T = K Qs^T (Qs = scale * Q, transposed once per block), so
// the online-softmax statistics of the block's queries live along the contiguous dimension and
// the softmax loops vectorize. Only K and V tiles are copied per tile pair, with plain row
// copies; all transposes happen once per query block. On tiles that straddle the diagonal or a
// segment start, the products leave out kMR x 16 (or 32) micro-tiles and k-steps that hold only masked
// pairs (see MaskGeometry): for packed short sequences that is most of the work.
//
// Sliding window (AttentionDims::window = w > 0). A row i sees keys [lo_i, i] with
// lo_i = max(seg_start[i], i - w + 1). Both terms are non-decreasing in i, so lo is too, and
// lo_i <= i: lo has exactly the two properties of seg_start that the tiling relies on. So the
// kernels work with lo wherever they would use the segment start (Problem::first_key), and the
// window reuses every skip the segments already have: a query block visits only the key tiles
// from its first row's lo to its last row (w + kBq - 1 keys, so at most
// ceil((w + kBq - 1) / kBk) + 1 tiles) instead of every tile up to the diagonal; pass B visits
// only the query blocks that reach a key tile; the edge of the band is trimmed, and skipped by
// micro-tile, like a segment start. Work and counted FLOPs go as n * (w + kBq), not n * Tk.
// With w = 0, or w at least every row's span i - seg_start[i] + 1, lo = seg_start and the
// arithmetic is that of the windowless kernel, bit for bit.
//
// Backward paths (both give bit-identical results, see attention_backward):
//  - per kv head: one task per kv head g owns dk/dv of head g and dq of its query heads;
//    one pass over (query head, query block, key tile), five tile products per pair;
//  - two passes, for when there are fewer kv heads than threads: pass A over (query head,
//    query block) owns dq; pass B over (kv head, key tile) owns dk/dv and revisits the query
//    blocks that see the tile. Seven tile products per pair in total.
//
// BF16 tensors (any of q, k, v, out, dout, dq, dk, dv; storage.h): every tile product already
// runs on fp32 copies in per-thread scratch, so a BF16 input is widened while it is packed (an
// exact conversion: the products see the values an F32 tensor of the same values would give,
// bit for bit) and a BF16 output is rounded to nearest even when stored, once per element and
// call: out after the row's last tile, dq when its block's accumulator is flushed. dk and dv
// sum over every query block that sees a key, so a BF16 dk or dv takes the two-pass backward,
// whose pass B owns a key tile of one kv head at a time: its rows are summed in fp32 tiles
// (kBk x h) and rounded once. Nothing of length n or Tk is converted.
//
// D with a BF16 out. dS = P (dP - D) relies on D_i = sum_j P_ij dP_ij, which makes every row of
// dS sum to zero: that cancellation is what keeps, e.g., the gradient of a key bias small and
// exact. The usual D = rowsum(dout * out) equals it only for the unrounded out; with out
// rounded to bf16 it is off by dout . (out - bf16(out)), relative 2^-9, and the error adds up
// over the rows instead of cancelling (a Qwen2 k_proj bias gradient came out 2.4x further from
// fp32 than transformers' bf16 eager attention, whose softmax backward sums P dP in fp32). So
// when out is BF16, pass A sums D_i = sum_j P_ij dP_ij itself, in fp32, from the tiles it
// computes anyway, and forms dq without knowing D in advance:
//     dq_i = scale (sum_j P_ij dP_ij k_j - D_i sum_j P_ij k_j)
// (one extra tile product, P K, per pair: eight instead of seven); pass B then uses that D.
#include "backend/cpu/attention.h"

#include <omp.h>

// SBP_ATTENTION_AVX512: the AVX-512 micro-kernels, where the build's own target has AVX-512 or
// attention_avx512.cpp compiles this file for it (its target pragma cannot define __AVX512F__
// for the lines below: GCC's C++ front end reads the whole file before it acts on a pragma).
#if defined(__AVX512F__) || defined(SBP_ATTENTION_AVX512_PRAGMA)
#define SBP_ATTENTION_AVX512 1
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_checks.h"
#include "backend/cpu/storage.h"
#include "backend/cpu/vec_math.h"
#include "core/error.h"

// attention_avx512.cpp compiles this file a second time, for AVX-512, into sbp::cpu::avx512.
#ifndef SBP_ATTENTION_NAMESPACE
#define SBP_ATTENTION_NAMESPACE sbp::cpu
#endif
namespace SBP_ATTENTION_NAMESPACE {
namespace {

// 128 x 64: a block's resident state (Q^T and the output accumulator, ~150 KiB at h = 128;
// in the backward also Q, dO, dO^T, ~360 KiB) stays in a 512 KiB L2, and the K/V traffic per
// FLOP is half that of 64-row blocks: measured ~10% faster than 64 x 64 on Zen 3.
constexpr int64_t kBq = 128;  // query rows per block
constexpr int64_t kBk = 64;   // keys per tile
constexpr int64_t kNc = 64;  // columns of a tile product's C per pass over its rows (L1-sized B)
#if defined(SBP_ATTENTION_AVX512)
constexpr int kMR = 8;  // micro-kernel rows: 8 x 32 accumulators = 16 of 32 AVX-512 registers
#else
constexpr int kMR = 6;  // micro-kernel rows: 6 x 16 accumulators = 12 of 16 AVX registers
#endif

// Leading dimensions of the scratch tiles are padded past a multiple of 64 bytes so that the
// rows of a tile do not all map to the same few L1 sets.
constexpr int64_t kLdq = kBq + 16;  // row length of key-major (kBk, kBq) tiles and Q^T, dO^T
constexpr int64_t kLdk = kBk + 16;  // row length of query-major (kBq, kBk) tiles and K^T, V^T

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// ---------------------------------------------------------------------------------------------
// Tile GEMM

// 8 floats. Internal only (everything here is inlined), so GCC's note that passing it by value
// has a different ABI without AVX does not concern us.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
using v8 = float __attribute__((vector_size(32)));

// A vector of V's width from, or to, unaligned floats (v8 here; v16 below with AVX-512).
template <class V>
inline V load_vec(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store_vec(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}
// a * b + c, fused when the target has FMA. Explicit, because left to -ffp-contract GCC fuses
// in some instantiations and not in others, and then an element's bits would depend on which
// micro-kernel computed it (see fmadd in vec_math.h).
inline v8 fma8(const v8& a, const v8& b, const v8& c) {
#if defined(__FMA__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  return a * b + c;
#endif
}

#if defined(SBP_ATTENTION_AVX512)
// 16 floats, one 512-bit register: where the target has AVX-512 the 16-column micro-tiles run
// on these (half the instructions of two v8; every element's FMA chain, and so its bits, the
// same).
using v16 = float __attribute__((vector_size(64)));
inline v16 fma16(const v16& a, const v16& b, const v16& c) {
  return reinterpret_cast<v16>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a),
                                               reinterpret_cast<__m512>(b),
                                               reinterpret_cast<__m512>(c)));
}
#endif

enum class Store {
  kSet,       // C = A B
  kAdd,       // C += A B
  kScaleAdd,  // C = diag(row_scale) C + A B  (online-softmax rescale of the output)
};

// C (MR, 8*NV) op= A (MR, kc) B (kc, 8*NV); A(r, k) = a[r*a_rs + k*a_ks], B(k, c) = b[k*ldb + c].
// The FMA chain of every output element runs over k in order starting from its initial value,
// whatever MR and NV are, so results do not depend on where a row falls in a tile.
template <int MR, int NV, Store kMode>
inline void micro_kernel(int64_t kc, const float* a, int64_t a_rs, int64_t a_ks,
                         const float* __restrict b, int64_t ldb, float* __restrict c, int64_t ldc,
                         const float* row_scale) {
  v8 acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      if constexpr (kMode == Store::kSet) {
        acc[r][v] = v8{};
      } else if constexpr (kMode == Store::kAdd) {
        acc[r][v] = load_vec<v8>(c + r * ldc + 8 * v);
      } else {
        acc[r][v] = load_vec<v8>(c + r * ldc + 8 * v) * row_scale[r];
      }
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    v8 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load_vec<v8>(b + k * ldb + 8 * v);
    const float* ak = a + k * a_ks;
    for (int r = 0; r < MR; ++r) {
      const float av = ak[r * a_rs];
      const v8 avv = {av, av, av, av, av, av, av, av};
      for (int v = 0; v < NV; ++v) acc[r][v] = fma8(avv, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store_vec(c + r * ldc + 8 * v, acc[r][v]);
}

#if defined(SBP_ATTENTION_AVX512)
// micro_kernel<MR, 2, kMode> on one 16-float register per row.
template <int MR, Store kMode>
inline void micro_kernel16(int64_t kc, const float* a, int64_t a_rs, int64_t a_ks,
                           const float* __restrict b, int64_t ldb, float* __restrict c,
                           int64_t ldc, const float* row_scale) {
  v16 acc[MR];
  for (int r = 0; r < MR; ++r) {
    if constexpr (kMode == Store::kSet) {
      acc[r] = v16{};
    } else if constexpr (kMode == Store::kAdd) {
      acc[r] = load_vec<v16>(c + r * ldc);
    } else {
      acc[r] = load_vec<v16>(c + r * ldc) * row_scale[r];
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const v16 bv = load_vec<v16>(b + k * ldb);
    const float* ak = a + k * a_ks;
    for (int r = 0; r < MR; ++r) {
      const float av = ak[r * a_rs];
      const v16 avv = {av, av, av, av, av, av, av, av, av, av, av, av, av, av, av, av};
      acc[r] = fma16(avv, bv, acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) store_vec(c + r * ldc, acc[r]);
}

// micro_kernel<MR, 4, kMode> on two 16-float registers per row: 2 MR accumulators. An FMA
// takes 4 cycles and two issue per cycle, so fewer than 8 independent chains leave the FMA units
// idle; micro_kernel16's MR = 6 chains did (attention at 55% of sgemm on an Intel AVX-512 core),
// 16 chains at MR = 8 do not. Every element's FMA chain is micro_kernel's, so are its bits.
template <int MR, Store kMode>
inline void micro_kernel32(int64_t kc, const float* a, int64_t a_rs, int64_t a_ks,
                           const float* __restrict b, int64_t ldb, float* __restrict c,
                           int64_t ldc, const float* row_scale) {
  v16 acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < 2; ++v) {
      if constexpr (kMode == Store::kSet) {
        acc[r][v] = v16{};
      } else if constexpr (kMode == Store::kAdd) {
        acc[r][v] = load_vec<v16>(c + r * ldc + 16 * v);
      } else {
        acc[r][v] = load_vec<v16>(c + r * ldc + 16 * v) * row_scale[r];
      }
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    const v16 b0 = load_vec<v16>(b + k * ldb);
    const v16 b1 = load_vec<v16>(b + k * ldb + 16);
    const float* ak = a + k * a_ks;
    for (int r = 0; r < MR; ++r) {
      const float av = ak[r * a_rs];
      const v16 avv = {av, av, av, av, av, av, av, av, av, av, av, av, av, av, av, av};
      acc[r][0] = fma16(avv, b0, acc[r][0]);
      acc[r][1] = fma16(avv, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    store_vec(c + r * ldc, acc[r][0]);
    store_vec(c + r * ldc + 16, acc[r][1]);
  }
}
#endif

// Same for the last w < 8 columns (head dims that are not a multiple of 8), in scalar code.
template <int MR, Store kMode>
inline void micro_kernel_tail(int64_t kc, int w, const float* a, int64_t a_rs, int64_t a_ks,
                              const float* __restrict b, int64_t ldb, float* __restrict c,
                              int64_t ldc, const float* row_scale) {
  float acc[MR][8];
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < w; ++j) {
      if constexpr (kMode == Store::kSet) {
        acc[r][j] = 0.0f;
      } else if constexpr (kMode == Store::kAdd) {
        acc[r][j] = c[r * ldc + j];
      } else {
        acc[r][j] = c[r * ldc + j] * row_scale[r];
      }
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < MR; ++r) {
      const float av = a[r * a_rs + k * a_ks];
      for (int j = 0; j < w; ++j) acc[r][j] = fmadd(av, b[k * ldb + j], acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < w; ++j) c[r * ldc + j] = acc[r][j];
}

// Which terms of a tile product can be nonzero. Masked (query, key) pairs have p = dS = 0, so
// on tiles that straddle the diagonal or a segment start the products can skip micro-tiles and
// k-steps that only hold masked pairs. Skipped k-steps would only have added exact zeros to the
// FMA chains, so skipping changes no bit of any result; a skipped S or dP micro-tile is left
// unwritten and must be masked by the caller (it only happens on tiles that are not `full`).
struct AllTerms {
  bool visible(int64_t, int64_t, int64_t, int64_t) const { return true; }
  void k_range(int64_t, int64_t, int64_t kc, int64_t* lo, int64_t* hi) const {
    *lo = 0;
    *hi = kc;
  }
};

// The allowed pairs of a query block and a key range: local query i (global row gi0 + i,
// first key lo[i], i < nr) and local key j (global js + j, j < nk) when
// lo[i] <= js + j <= gi0 + i.
struct MaskGeometry {
  const int32_t* lo = nullptr;  // (nr) non-decreasing: segment start, or window start
  int64_t gi0 = 0, nr = 0, js = 0, nk = 0;

  // True when no pair of queries [i0, i1] x keys [j0, j1] is allowed. Ranges that reach into
  // padding (i1 >= nr or j1 >= nk) count as allowed: padding is computed, never left unwritten.
  bool none_allowed(int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (i1 >= nr || j1 >= nk) return false;
    return js + j0 > gi0 + i1 || js + j1 < lo[i0];
  }
  // Keys [*klo, *khi) that some query of [i0, i1] may see.
  void keys_of(int64_t i0, int64_t i1, int64_t* klo, int64_t* khi) const {
    *klo = std::clamp<int64_t>(lo[i0] - js, 0, nk);
    *khi = std::clamp<int64_t>(gi0 + std::min(i1, nr - 1) - js + 1, *klo, nk);
  }
  // Queries [*qlo, *qhi) that may see some key of [j0, j1].
  void queries_of(int64_t j0, int64_t j1, int64_t* qlo, int64_t* qhi) const {
    *qlo = std::clamp<int64_t>(js + j0 - gi0, 0, nr);
    const int64_t last = js + std::min(j1, nk - 1);
    *qhi = std::max(*qlo, static_cast<int64_t>(std::upper_bound(lo, lo + nr, last) - lo));
  }
};

// S^T, dP^T: rows are keys, columns queries; skip micro-tiles without an allowed pair.
struct KeyRowsQueryCols : AllTerms {
  MaskGeometry g;
  bool visible(int64_t r0, int64_t mr, int64_t c0, int64_t w) const {
    return !g.none_allowed(c0, c0 + w - 1, r0, r0 + mr - 1);
  }
};
// S, dP in pass B: rows are queries, columns keys.
struct QueryRowsKeyCols : AllTerms {
  MaskGeometry g;
  bool visible(int64_t r0, int64_t mr, int64_t c0, int64_t w) const {
    return !g.none_allowed(r0, r0 + mr - 1, c0, c0 + w - 1);
  }
};
// P V, dS K: rows are queries, k runs over keys.
struct QueryRowsKeySteps : AllTerms {
  MaskGeometry g;
  void k_range(int64_t r0, int64_t mr, int64_t, int64_t* lo, int64_t* hi) const {
    g.keys_of(r0, r0 + mr - 1, lo, hi);
  }
};
// P^T dO, dS^T Q: rows are keys, k runs over queries.
struct KeyRowsQuerySteps : AllTerms {
  MaskGeometry g;
  void k_range(int64_t r0, int64_t mr, int64_t, int64_t* lo, int64_t* hi) const {
    g.queries_of(r0, r0 + mr - 1, lo, hi);
  }
};

// One row panel of MR rows starting at row r0 of the tile, all columns; returns the FLOPs.
template <int MR, Store kMode, class Terms>
inline int64_t row_panel(const Terms& terms, int64_t r0, int64_t j0, int64_t n, int64_t kc,
                         const float* a,
                         int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb, float* c,
                         int64_t ldc, const float* rs) {
  int64_t klo = 0, khi = kc;
  terms.k_range(r0, MR, kc, &klo, &khi);
  // C += nothing: leave it. (kScaleAdd must still scale, with an empty k loop.)
  if (klo >= khi && kMode == Store::kAdd) return 0;
  a += klo * a_ks;
  b += klo * ldb;
  kc = khi - klo;
  int64_t flops = 0;
  int64_t j = j0;
  // Only a product that overwrites C may leave micro-tiles out.
  auto visible = [&](int64_t c0, int64_t w) {
    return kMode != Store::kSet || terms.visible(r0, MR, c0, w);
  };
#if defined(SBP_ATTENTION_AVX512)
  for (; j + 32 <= n; j += 32) {
    if (!visible(j, 32)) continue;
    micro_kernel32<MR, kMode>(kc, a, a_rs, a_ks, b + j, ldb, c + j, ldc, rs);
    flops += 2 * MR * 32 * kc;
  }
#endif
  for (; j + 16 <= n; j += 16) {
    if (!visible(j, 16)) continue;
#if defined(SBP_ATTENTION_AVX512)
    micro_kernel16<MR, kMode>(kc, a, a_rs, a_ks, b + j, ldb, c + j, ldc, rs);
#else
    micro_kernel<MR, 2, kMode>(kc, a, a_rs, a_ks, b + j, ldb, c + j, ldc, rs);
#endif
    flops += 2 * MR * 16 * kc;
  }
  if (j + 8 <= n) {
    if (visible(j, 8)) {
      micro_kernel<MR, 1, kMode>(kc, a, a_rs, a_ks, b + j, ldb, c + j, ldc, rs);
      flops += 2 * MR * 8 * kc;
    }
    j += 8;
  }
  if (j < n && visible(j, n - j)) {
    micro_kernel_tail<MR, kMode>(kc, static_cast<int>(n - j), a, a_rs, a_ks, b + j, ldb, c + j, ldc,
                                 rs);
    flops += 2 * MR * (n - j) * kc;
  }
  return flops;
}

// C (m, n) op= A (m, kc) B (kc, n), strides as in micro_kernel, restricted to the terms that
// `terms` allows; returns the FLOPs performed.
// Kept out of line on purpose: inlined into the forward's tile loop, GCC 12 compiled the
// micro-kernels into code that ran at half speed (measured 36 vs 64 GFLOP/s on one core).
template <Store kMode, class Terms = AllTerms>
__attribute__((noinline)) int64_t tile_gemm(int64_t m, int64_t n, int64_t kc, const float* a,
                                            int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
                                            float* c, int64_t ldc, const float* row_scale = nullptr,
                                            const Terms& terms = Terms{}) {
  int64_t flops = 0;
  // Column blocks of kNc outside, row panels inside: the block's B panel (kc x kNc) is read by
  // every row panel and stays in L1, where a sweep over all n columns per row panel (B of a
  // 128-column tile is 64 KiB at kc = 128) would stream it from L2 once per row panel.
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
  const int64_t j1 = std::min(n, j0 + kNc);
  for (int64_t i = 0; i < m; i += kMR) {
    const float* ai = a + i * a_rs;
    float* ci = c + i * ldc;
    const float* rs = row_scale ? row_scale + i : nullptr;
    auto panel = [&]<int MR>() {
      return row_panel<MR, kMode>(terms, i, j0, j1, kc, ai, a_rs, a_ks, b, ldb, ci, ldc, rs);
    };
    switch (std::min<int64_t>(kMR, m - i)) {
#if defined(SBP_ATTENTION_AVX512)
      case 8: flops += panel.template operator()<8>(); break;
      case 7: flops += panel.template operator()<7>(); break;
#endif
      case 6: flops += panel.template operator()<6>(); break;
      case 5: flops += panel.template operator()<5>(); break;
      case 4: flops += panel.template operator()<4>(); break;
      case 3: flops += panel.template operator()<3>(); break;
      case 2: flops += panel.template operator()<2>(); break;
      default: flops += panel.template operator()<1>(); break;
    }
  }
  }
  return flops;
}

// ---------------------------------------------------------------------------------------------
// Small vectorizable helpers

// All-ones if b, else zero: selects done on bits, so that GCC if-converts them (a float `?:`
// over an expensive operand would be turned into a branch, which stops vectorization).
inline uint32_t mask_of(bool b) { return 0u - static_cast<uint32_t>(b); }
inline float keep_if(uint32_t m, float x) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & m);
}
inline float select(uint32_t m, float x, float y) {
  return std::bit_cast<float>((std::bit_cast<uint32_t>(x) & m) | (std::bit_cast<uint32_t>(y) & ~m));
}

// sum_c a[c] * b[c] in a fixed order: eight interleaved partial sums, then a fixed tree.
float dot_fixed(const float* __restrict a, const float* __restrict b, int64_t len) {
  float acc[8] = {};
  int64_t c = 0;
  for (; c + 8 <= len; c += 8)
    for (int l = 0; l < 8; ++l) acc[l] = fmadd(a[c + l], b[c + l], acc[l]);
  for (int l = 0; c < len; ++c, ++l) acc[l] = fmadd(a[c], b[c], acc[l]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// ---------------------------------------------------------------------------------------------
// Float tensor data: F32 or BF16

// A float tensor's data as the kernels see it: F32, read and written in place, or BF16, widened
// to fp32 when packed into scratch and rounded when results are stored. Offsets in elements.
struct FloatData {
  void* p = nullptr;
  bool bf16 = false;

  static FloatData of(const Tensor& t) { return {t.data, t.dtype == DType::BF16}; }
  FloatData operator+(int64_t off) const {
    return {static_cast<char*>(p) + off * (bf16 ? 2 : 4), bf16};
  }
  float* f32() const { return static_cast<float*>(p); }  // only where F32 is known
};

// f(ptr) with ptr the data as const float* or const bf16*.
template <class F>
void with_data(const FloatData& x, F&& f) {
  if (x.bf16) {
    f(static_cast<const bf16*>(x.p));
  } else {
    f(static_cast<const float*>(x.p));
  }
}

// dst[0, h) (F32 or BF16) = src[0, h) * s (or += when add), rounded once per element.
void store_row(FloatData dst, const float* __restrict src, int64_t h, float s, bool add) {
  if (dst.bf16) {
    bf16* d = static_cast<bf16*>(dst.p);
    for (int64_t e = 0; e < h; ++e) store(d[e], add ? load(d[e]) + src[e] : src[e] * s);
  } else {
    float* d = dst.f32();
    if (add) {
      for (int64_t e = 0; e < h; ++e) d[e] += src[e];
    } else {
      for (int64_t e = 0; e < h; ++e) d[e] = src[e] * s;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Problem description

struct Problem {
  int64_t n = 0;                           // query rows
  int64_t q_offset = 0;                    // global row of query row 0
  int64_t tk = 0;                          // key rows
  int64_t k0 = 0;  // global row of k's first row (AttentionDims::k_offset): key j is row j - k0
  int64_t H = 0, G = 0, h = 0, group = 0;  // group = H / G query heads per kv head
  float scale = 0.0f;
  int64_t ldq_g = 0;   // H*h: row stride of q, out, dq, dout
  int64_t ldkv_g = 0;  // G*h: row stride of k, v, dk, dv
  int64_t ldh = 0;     // row length of (rows, h) scratch tiles
  int64_t n_blocks = 0;
  const int32_t* seg = nullptr;  // (>= q_offset + n) first row of each global row's segment
  int64_t window = 0;            // sliding window; 0 = none

  int64_t kv_head(int64_t hq) const { return hq / group; }
  // First key global row r sees: its segment start, or its window's start if later.
  // Non-decreasing in r and <= r (see the top of the file).
  int64_t first_key(int64_t r) const {
    return window > 0 ? std::max<int64_t>(seg[r], r - window + 1) : seg[r];
  }
};

// The rows of query block ib and the keys they can see.
struct BlockRange {
  int64_t r0 = 0;    // first local query row
  int64_t nr = 0;    // rows in the block
  int64_t ncp = 0;   // nr rounded up to 8: width of the score tiles
  int64_t gi0 = 0;   // global row of the first query
  int64_t gi1 = 0;   // global row of the last query
  int64_t kmin = 0;  // first key any row of the block sees (first keys are non-decreasing)
  int64_t kmax = 0;  // last key any row sees (causal)
};

BlockRange block_range(const Problem& p, int64_t ib) {
  BlockRange b;
  b.r0 = ib * kBq;
  b.nr = std::min(kBq, p.n - b.r0);
  b.ncp = round_up(b.nr, 8);
  b.gi0 = p.q_offset + b.r0;
  b.gi1 = b.gi0 + b.nr - 1;
  b.kmin = p.first_key(b.gi0);
  b.kmax = b.gi1;
  return b;
}

// Keys [js, je) of tile t that block b can see; empty when js >= je.
struct KeyRange {
  int64_t js = 0, je = 0;
  bool full = false;  // every (query, key) pair of the block and range is allowed: no mask
};

KeyRange key_range(const Problem& p, const BlockRange& b, int64_t t) {
  KeyRange r;
  r.js = std::max(t * kBk, b.kmin);
  r.je = std::min((t + 1) * kBk, b.kmax + 1);
  r.full = p.first_key(b.gi1) <= r.js && r.je - 1 <= b.gi0;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Per-thread scratch, allocated once per call: O(kBq * h) floats, nothing proportional to n or
// Tk. Left uninitialized (every piece is written before it is read), so the parts a call does
// not use cost neither time nor resident memory.

struct Scratch {
  std::unique_ptr<float[]> storage;
  std::unique_ptr<int32_t[]> istorage;
  float* qt = nullptr;      // (h, kLdq) scale * Q^T of the block: B of S^T = K Qs^T
  float* qs = nullptr;      // (kBq, ldh) scale * Q, natural (pass B: A of S = Qs K^T)
  float* qn = nullptr;      // (kBq, ldh) Q, natural (backward: B of dK += dS^T Q)
  float* dot = nullptr;     // (h, kLdq) dO^T of the block: B of dP^T = V dO^T
  float* don = nullptr;     // (kBq, ldh) dO natural (B of dV += P^T dO; pass B: A of dP)
  float* acc = nullptr;     // (kBq, ldh) output accumulator (forward) or dq accumulator
  float* kn = nullptr;      // (kBk, ldh) key tile, natural
  float* vn = nullptr;      // (kBk, ldh) value tile, natural
  float* kt = nullptr;      // (h, kLdk) K^T of a tile (pass B: B of S = Qs K^T)
  float* vt = nullptr;      // (h, kLdk) V^T of a tile (pass B: B of dP = dO V^T)
  float* s = nullptr;       // (kBk, kLdq) key-major scores -> probabilities; pass B (kBq, kLdk)
  float* ds = nullptr;      // (kBk, kLdq) key-major dP -> dS; pass B (kBq, kLdk)
  float* m = nullptr;       // (kLdq) running row max (scaled scores)
  float* l = nullptr;       // (kLdq) running row sum of exp
  float* alpha = nullptr;   // (kLdq) rescale factor of the output rows for the current tile
  float* base = nullptr;    // (kLdq) exponent offset: new max, 0 while no key was seen
  float* rowsum = nullptr;  // (kLdq) tile max, then tile sum of p
  float* lse = nullptr;     // (kLdq) backward: lse of the block's rows
  float* dd = nullptr;      // (kLdq) backward: D = rowsum(dout * out)
  float* ra = nullptr;      // (ldh) backward: a BF16 dout row widened, for D
  float* rb = nullptr;      // (ldh) backward: a BF16 out row widened, for D
  float* dka = nullptr;     // (kBk, ldh) pass B, BF16 dk: fp32 sums of the tile's dk rows
  float* dva = nullptr;     // (kBk, ldh) pass B, BF16 dv: the same for dv
  float* pk = nullptr;      // (kBq, ldh) pass A with exact D: sum_j P_ij k_j
  float* dsum = nullptr;    // (kLdq) pass A with exact D: sum_j P_ij dP_ij
  int32_t* lo = nullptr;    // (kLdq) first key of each query row; INT32_MAX on padding
  int32_t* gi = nullptr;    // (kLdq) global row of each query row; -1 on padding

  Scratch(int64_t h, int64_t ldh) {
    const int64_t tile = std::max(kBk * kLdq, kBq * kLdk);
    const int64_t sizes[] = {h * kLdq,  kBq * ldh, kBq * ldh, h * kLdq,  kBq * ldh,
                             kBq * ldh, kBk * ldh, kBk * ldh, h * kLdk,  h * kLdk,
                             tile,      tile,      kLdq,      kLdq,      kLdq,
                             kLdq,      kLdq,      kLdq,      kLdq,      ldh,
                             ldh,       kBk * ldh, kBk * ldh, kBq * ldh, kLdq};
    float** slots[] = {&qt, &qs,    &qn,   &dot,    &don, &acc, &kn, &vn, &kt,  &vt,  &s,  &ds,  &m,
                       &l,  &alpha, &base, &rowsum, &lse, &dd,  &ra, &rb, &dka, &dva, &pk, &dsum};
    static_assert(std::size(sizes) == std::size(slots));
    int64_t total = 0;
    for (int64_t size : sizes) total += round_up(size, 16);  // 64-byte aligned pieces
    storage = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(total + 16));
    float* p = storage.get();
    p += (16 - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % 16) % 16;
    for (size_t i = 0; i < std::size(slots); ++i) {
      *slots[i] = p;
      p += round_up(sizes[i], 16);
    }
    istorage = std::make_unique_for_overwrite<int32_t[]>(static_cast<size_t>(2 * kLdq));
    lo = istorage.get();
    gi = istorage.get() + kLdq;
  }
};

// Per-row mask data of a block: padded rows never see a key.
void load_row_info(const Problem& p, const BlockRange& b, Scratch& w) {
  for (int64_t i = 0; i < kLdq; ++i) {
    if (i < b.nr) {
      w.lo[i] = static_cast<int32_t>(p.first_key(b.gi0 + i));
      w.gi[i] = static_cast<int32_t>(b.gi0 + i);
    } else {
      w.lo[i] = std::numeric_limits<int32_t>::max();
      w.gi[i] = -1;
    }
  }
}

// dst (h, kLdq) = s * src^T for the rows of a block; src rows (nr, >= h) with stride ld.
// Columns [nr, ncp) are zeroed so padded queries compute harmless zeros.
template <class T>
void pack_transposed(float* __restrict dst, const T* __restrict src, int64_t ld,
                     const BlockRange& b, int64_t h, float s) {
  for (int64_t i = 0; i < b.nr; ++i) {
    const T* row = src + i * ld;
    for (int64_t d = 0; d < h; ++d) dst[d * kLdq + i] = s * load(row[d]);
  }
  for (int64_t d = 0; d < h; ++d)
    for (int64_t i = b.nr; i < b.ncp; ++i) dst[d * kLdq + i] = 0.0f;
}
void pack_transposed(float* dst, FloatData src, int64_t ld, const BlockRange& b, int64_t h,
                     float s) {
  with_data(src, [&](const auto* x) { pack_transposed(dst, x, ld, b, h, s); });
}

// dst (rows, ldh) = s * src rows (stride ld); s == 1 copies.
template <class T>
void pack_rows(float* __restrict dst, int64_t ldh, const T* __restrict src, int64_t ld,
               int64_t rows, int64_t h, float s) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = src + i * ld;
    float* out = dst + i * ldh;
    if (s == 1.0f && !is_bf16<T>) {
      std::memcpy(out, row, static_cast<size_t>(h) * sizeof(float));
    } else {
      for (int64_t d = 0; d < h; ++d) out[d] = s * load(row[d]);
    }
  }
}
void pack_rows(float* dst, int64_t ldh, FloatData src, int64_t ld, int64_t rows, int64_t h,
               float s) {
  with_data(src, [&](const auto* x) { pack_rows(dst, ldh, x, ld, rows, h, s); });
}

// ---------------------------------------------------------------------------------------------
// Forward

struct FwdTensors {
  FloatData out;  // (n, H*h)
  float* lse;     // (n, H)
  FloatData q;    // (n, H*h)
  FloatData k;    // (Tk, G*h)
  FloatData v;    // (Tk, G*h)
};

// Online softmax over one key-major score tile (nk, ncp) in w.s; leaves p in w.s.
// Identical arithmetic for every allowed (query, key) pair whether or not the tile is masked.
void softmax_tile_forward(Scratch& w, int64_t nk, int64_t ncp, int64_t js, bool full) {
  float* __restrict s = w.s;
  float* __restrict mt = w.rowsum;  // reused: tile max first, then tile sum
  const int32_t* __restrict lo = w.lo;
  const int32_t* __restrict gi = w.gi;
  for (int64_t i = 0; i < ncp; ++i) mt[i] = kNegInf;
  for (int64_t j = 0; j < nk; ++j) {
    const float* sj = s + j * kLdq;
    const int32_t kj = static_cast<int32_t>(js + j);
    if (full) {
      for (int64_t i = 0; i < ncp; ++i) mt[i] = sj[i] > mt[i] ? sj[i] : mt[i];
    } else {
      for (int64_t i = 0; i < ncp; ++i) {
        const float x = select(mask_of((lo[i] <= kj) & (kj <= gi[i])), sj[i], kNegInf);
        mt[i] = x > mt[i] ? x : mt[i];
      }
    }
  }
  float* __restrict m = w.m;
  float* __restrict base = w.base;
  float* __restrict alpha = w.alpha;
  for (int64_t i = 0; i < ncp; ++i) {
    const float mnew = mt[i] > m[i] ? mt[i] : m[i];
    // While a row has seen no allowed key its max is -inf; offset by 0 instead, which makes
    // every p and alpha 0 (and avoids -inf - -inf = NaN).
    base[i] = mnew == kNegInf ? 0.0f : mnew;
    alpha[i] = exp_f32(m[i] - base[i]);
    m[i] = mnew;
    mt[i] = 0.0f;
  }
  for (int64_t j = 0; j < nk; ++j) {
    float* sj = s + j * kLdq;
    const int32_t kj = static_cast<int32_t>(js + j);
    if (full) {
      for (int64_t i = 0; i < ncp; ++i) {
        const float pv = exp_f32(sj[i] - base[i]);
        sj[i] = pv;
        mt[i] += pv;
      }
    } else {
      for (int64_t i = 0; i < ncp; ++i) {
        const uint32_t allowed = mask_of((lo[i] <= kj) & (kj <= gi[i]));
        const float pv = keep_if(allowed, exp_f32(sj[i] - base[i]));
        sj[i] = pv;
        mt[i] += pv;
      }
    }
  }
  float* __restrict l = w.l;
  for (int64_t i = 0; i < ncp; ++i) l[i] = fmadd(l[i], alpha[i], mt[i]);
}

int64_t forward_block(const Problem& p, const FwdTensors& t, int64_t hq, int64_t ib, Scratch& w) {
  const int64_t h = p.h, ldh = p.ldh;
  const int64_t g = p.kv_head(hq);
  const BlockRange b = block_range(p, ib);
  int64_t flops = 0;

  load_row_info(p, b, w);
  // (nr, h) rows of head hq of the block, scaled and transposed once for all key tiles
  pack_transposed(w.qt, t.q + b.r0 * p.ldq_g + hq * h, p.ldq_g, b, h, p.scale);
  for (int64_t i = 0; i < kLdq; ++i) {
    w.m[i] = kNegInf;
    w.l[i] = 0.0f;
  }
  for (int64_t i = 0; i < b.nr; ++i) std::memset(w.acc + i * ldh, 0, sizeof(float) * h);

  for (int64_t tile = b.kmin / kBk; tile <= b.kmax / kBk; ++tile) {
    const KeyRange kr = key_range(p, b, tile);
    const int64_t nk = kr.je - kr.js;
    if (nk <= 0) continue;
    // (nk, h) key and value rows of kv head g
    pack_rows(w.kn, ldh, t.k + (kr.js - p.k0) * p.ldkv_g + g * h, p.ldkv_g, nk, h, 1.0f);
    pack_rows(w.vn, ldh, t.v + (kr.js - p.k0) * p.ldkv_g + g * h, p.ldkv_g, nk, h, 1.0f);
    const MaskGeometry mg{w.lo, b.gi0, b.nr, kr.js, nk};
    // (nk, ncp) S^T = K Qs^T
    flops += tile_gemm<Store::kSet>(nk, b.ncp, h, w.kn, ldh, 1, w.qt, kLdq, w.s, kLdq, nullptr,
                                    KeyRowsQueryCols{{}, mg});
    softmax_tile_forward(w, nk, b.ncp, kr.js, kr.full);
    // (nr, h) O = diag(alpha) O + P V, with P(i, j) = s[j, i]
    flops += tile_gemm<Store::kScaleAdd>(b.nr, h, nk, w.s, 1, kLdq, w.vn, ldh, w.acc, ldh, w.alpha,
                                         QueryRowsKeySteps{{}, mg});
  }

  for (int64_t i = 0; i < b.nr; ++i) {
    // Every row sees at least its own key, so l >= 1.
    const float inv = 1.0f / w.l[i];
    store_row(t.out + (b.r0 + i) * p.ldq_g + hq * h, w.acc + i * ldh, h, inv, /*add=*/false);
    t.lse[(b.r0 + i) * p.H + hq] = w.m[i] + std::log(w.l[i]);
  }
  return flops;
}

// ---------------------------------------------------------------------------------------------
// Backward

struct BwdTensors {
  FloatData dq;              // (n, H*h)
  FloatData dk;              // (Tk, G*h)
  FloatData dv;              // (Tk, G*h)
  FloatData dout;            // (n, H*h)
  FloatData q;               // (n, H*h)
  FloatData k;               // (Tk, G*h)
  FloatData v;               // (Tk, G*h)
  FloatData out;             // (n, H*h)
  const float* lse;          // (n, H)
  const float* d = nullptr;  // (n, H) D = rowsum(dout * out) if precomputed, else null
  float* d_exact = nullptr;  // (n, H) pass A with a BF16 out: sums D = sum_j P dP here
};

// D = rowsum(dout * out) of local row `row` and head hq. BF16 rows are widened into w.ra, w.rb
// first, so the sum is the same fixed-order fp32 sum.
float row_d(const Problem& p, const BwdTensors& t, int64_t row, int64_t hq, Scratch& w) {
  const int64_t off = row * p.ldq_g + hq * p.h;
  auto widened = [&](FloatData x, float* buf) -> const float* {
    if (!x.bf16) return x.f32() + off;
    pack_rows(buf, p.ldh, x + off, p.ldq_g, 1, p.h, 1.0f);
    return buf;
  };
  return dot_fixed(widened(t.dout, w.ra), widened(t.out, w.rb), p.h);
}

// lse and D of the block's rows (0 on padding).
void load_row_stats(const Problem& p, const BwdTensors& t, int64_t hq, const BlockRange& b,
                    Scratch& w) {
  for (int64_t i = 0; i < kLdq; ++i) {
    if (i < b.nr) {
      const int64_t row = b.r0 + i;
      w.lse[i] = t.lse[row * p.H + hq];
      // Pass A with exact D: dS is formed without D (see the top of the file).
      w.dd[i] = t.d_exact ? 0.0f : t.d ? t.d[row * p.H + hq] : row_d(p, t, row, hq, w);
    } else {
      w.lse[i] = 0.0f;
      w.dd[i] = 0.0f;
    }
  }
}

// P = exp(S - lse) (masked), dS = scale * P * (dP - D), on key-major tiles (nk, ncp). With
// dsum (exact D, pass A; D = 0 in w.dd then) also dsum[i] += P dP over the tile's keys.
// The expression is the same as in ds_query_major, element by element.
// The loops exist twice, with and without the dsum term, chosen once per call: left as one loop
// with `if (dsum)` inside, GCC if-converts the test into AVX-512 masked loads and stores of
// dsum[i] with an all-false mask when dsum is null, and on Intel cores a masked access to an
// unmapped page takes a microcode assist every time (fault suppression): that one line was 80%
// of backward_pair's time there (AMD cores suppress it without the assist).
template <bool kDsum>
void ds_key_major_loops(Scratch& w, const Problem& p, int64_t nk, int64_t ncp, int64_t js,
                        bool full, float* __restrict dsum) {
  const float* __restrict lse = w.lse;
  const float* __restrict dd = w.dd;
  const int32_t* __restrict lo = w.lo;
  const int32_t* __restrict gi = w.gi;
  const float scale = p.scale;
  for (int64_t j = 0; j < nk; ++j) {
    float* __restrict sj = w.s + j * kLdq;
    float* __restrict dj = w.ds + j * kLdq;
    const int32_t kj = static_cast<int32_t>(js + j);
    if (full) {
      for (int64_t i = 0; i < ncp; ++i) {
        const float pv = exp_f32(sj[i] - lse[i]);
        sj[i] = pv;
        if constexpr (kDsum) dsum[i] += pv * dj[i];
        dj[i] = scale * pv * (dj[i] - dd[i]);
      }
    } else {
      for (int64_t i = 0; i < ncp; ++i) {
        const uint32_t allowed = mask_of((lo[i] <= kj) & (kj <= gi[i]));
        const float pv = keep_if(allowed, exp_f32(sj[i] - lse[i]));
        sj[i] = pv;
        // dP of a masked pair may be unwritten (skipped micro-tile): mask dS too.
        if constexpr (kDsum) dsum[i] += keep_if(allowed, pv * dj[i]);
        dj[i] = keep_if(allowed, scale * pv * (dj[i] - dd[i]));
      }
    }
  }
}

void ds_key_major(Scratch& w, const Problem& p, int64_t nk, int64_t ncp, int64_t js, bool full,
                  float* __restrict dsum) {
  if (dsum)
    ds_key_major_loops<true>(w, p, nk, ncp, js, full, dsum);
  else
    ds_key_major_loops<false>(w, p, nk, ncp, js, full, nullptr);
}

// Query-major twin of ds_key_major for pass B: tiles (nr, kLdk), keys [js, js + nkp).
void ds_query_major(Scratch& w, const Problem& p, int64_t nr, int64_t nkp, int64_t js, bool full) {
  const float scale = p.scale;
  for (int64_t i = 0; i < nr; ++i) {
    float* __restrict si = w.s + i * kLdk;
    float* __restrict di = w.ds + i * kLdk;
    const float lse = w.lse[i], dd = w.dd[i];
    const int32_t lo = w.lo[i], gi = w.gi[i];
    if (full) {
      for (int64_t j = 0; j < nkp; ++j) {
        const float pv = exp_f32(si[j] - lse);
        si[j] = pv;
        di[j] = scale * pv * (di[j] - dd);
      }
    } else {
      for (int64_t j = 0; j < nkp; ++j) {
        const int32_t kj = static_cast<int32_t>(js + j);
        const uint32_t allowed = mask_of((lo <= kj) & (kj <= gi));
        const float pv = keep_if(allowed, exp_f32(si[j] - lse));
        si[j] = pv;
        di[j] = keep_if(allowed, scale * pv * (di[j] - dd));
      }
    }
  }
}

// Packs what every key tile of query block b of head hq needs (key-major orientation) and
// clears the dq accumulator.
void prepare_query_block(const Problem& p, const BwdTensors& t, int64_t hq, const BlockRange& b,
                         Scratch& w, bool need_dkdv) {
  const int64_t h = p.h, ldh = p.ldh;
  const int64_t off = b.r0 * p.ldq_g + hq * h;
  load_row_info(p, b, w);
  load_row_stats(p, t, hq, b, w);
  pack_transposed(w.qt, t.q + off, p.ldq_g, b, h, p.scale);
  pack_transposed(w.dot, t.dout + off, p.ldq_g, b, h, 1.0f);
  if (need_dkdv) {
    pack_rows(w.qn, ldh, t.q + off, p.ldq_g, b.nr, h, 1.0f);
    pack_rows(w.don, ldh, t.dout + off, p.ldq_g, b.nr, h, 1.0f);
  }
  for (int64_t i = 0; i < b.nr; ++i) std::memset(w.acc + i * ldh, 0, sizeof(float) * h);
  if (t.d_exact) {
    for (int64_t i = 0; i < b.nr; ++i) std::memset(w.pk + i * ldh, 0, sizeof(float) * h);
    std::fill(w.dsum, w.dsum + kLdq, 0.0f);
  }
}

// One (query block, key range) pair, key-major: dq accumulates in w.acc; dk/dv rows
// [js, je) of kv head g are added in place when need_dkdv.
int64_t backward_pair(const Problem& p, const BwdTensors& t, int64_t g, const BlockRange& b,
                      const KeyRange& kr, Scratch& w, bool need_dkdv) {
  const int64_t h = p.h, ldh = p.ldh;
  const int64_t nk = kr.je - kr.js;
  int64_t flops = 0;
  // (nk, h) key and value rows of kv head g
  pack_rows(w.kn, ldh, t.k + (kr.js - p.k0) * p.ldkv_g + g * h, p.ldkv_g, nk, h, 1.0f);
  pack_rows(w.vn, ldh, t.v + (kr.js - p.k0) * p.ldkv_g + g * h, p.ldkv_g, nk, h, 1.0f);
  const MaskGeometry mg{w.lo, b.gi0, b.nr, kr.js, nk};
  const KeyRowsQueryCols score_terms{{}, mg};
  // (nk, ncp) S^T = K Qs^T and dP^T = V dO^T
  flops += tile_gemm<Store::kSet>(nk, b.ncp, h, w.kn, ldh, 1, w.qt, kLdq, w.s, kLdq, nullptr,
                                  score_terms);
  flops += tile_gemm<Store::kSet>(nk, b.ncp, h, w.vn, ldh, 1, w.dot, kLdq, w.ds, kLdq, nullptr,
                                  score_terms);
  ds_key_major(w, p, nk, b.ncp, kr.js, kr.full, t.d_exact ? w.dsum : nullptr);
  if (t.d_exact) {  // (nr, h) sum_j P_ij k_j; A(i, j) = s[j, i]
    flops += tile_gemm<Store::kAdd>(b.nr, h, nk, w.s, 1, kLdq, w.kn, ldh, w.pk, ldh, nullptr,
                                    QueryRowsKeySteps{{}, mg});
  }
  if (need_dkdv) {  // the per-kv-head path: dk and dv are F32 (see attention_backward)
    const int64_t off = (kr.js - p.k0) * p.ldkv_g + g * h;
    const KeyRowsQuerySteps terms{{}, mg};
    // (nk, h) dV += P^T dO and dK += dS^T Q; A(j, i) = s[j, i]
    flops += tile_gemm<Store::kAdd>(nk, h, b.nr, w.s, kLdq, 1, w.don, ldh, t.dv.f32() + off,
                                    p.ldkv_g, nullptr, terms);
    flops += tile_gemm<Store::kAdd>(nk, h, b.nr, w.ds, kLdq, 1, w.qn, ldh, t.dk.f32() + off,
                                    p.ldkv_g, nullptr, terms);
  }
  // (nr, h) dQ += dS K; A(i, j) = ds[j, i]
  flops += tile_gemm<Store::kAdd>(b.nr, h, nk, w.ds, 1, kLdq, w.kn, ldh, w.acc, ldh, nullptr,
                                  QueryRowsKeySteps{{}, mg});
  return flops;
}

void flush_dq(const Problem& p, const BwdTensors& t, int64_t hq, const BlockRange& b,
              const Scratch& w) {
  if (t.d_exact) {  // dq_i = acc_i - scale D_i pk_i, and D for pass B
    for (int64_t i = 0; i < b.nr; ++i) {
      float* __restrict acc = w.acc + i * p.ldh;
      const float* __restrict pk = w.pk + i * p.ldh;
      const float c = p.scale * w.dsum[i];
      for (int64_t d = 0; d < p.h; ++d) acc[d] -= c * pk[d];
      t.d_exact[(b.r0 + i) * p.H + hq] = w.dsum[i];
    }
  }
  for (int64_t i = 0; i < b.nr; ++i)
    store_row(t.dq + (b.r0 + i) * p.ldq_g + hq * p.h, w.acc + i * p.ldh, p.h, 1.0f, /*add=*/true);
}

// All key tiles of query block ib of head hq (dq; and dk/dv when need_dkdv).
int64_t backward_query_block(const Problem& p, const BwdTensors& t, int64_t hq, int64_t ib,
                             Scratch& w, bool need_dkdv) {
  const BlockRange b = block_range(p, ib);
  const int64_t g = p.kv_head(hq);
  int64_t flops = 0;
  prepare_query_block(p, t, hq, b, w, need_dkdv);
  for (int64_t tile = b.kmin / kBk; tile <= b.kmax / kBk; ++tile) {
    const KeyRange kr = key_range(p, b, tile);
    if (kr.je <= kr.js) continue;
    flops += backward_pair(p, t, g, b, kr, w, need_dkdv);
  }
  flush_dq(p, t, hq, b, w);
  return flops;
}

// Pass B: dk/dv rows of key tile `tile` of kv head g, from every query block that sees them,
// in the same (query head, query block) order and with the same arithmetic per element as the
// per-kv-head path, in query-major orientation so that the transposes are once per tile.
int64_t backward_key_tile(const Problem& p, const BwdTensors& t, int64_t g, int64_t tile,
                          Scratch& w) {
  const int64_t h = p.h, ldh = p.ldh;
  const int64_t j0 = tile * kBk;
  const int64_t j1 = std::min({j0 + kBk, p.k0 + p.tk, p.q_offset + p.n});  // keys past j1: nothing
  // With a key offset the tile may start below k's first row; keys below it are seen by no
  // query (backend.h), so their columns stay zero and their rows are neither read nor written.
  const int64_t ja = std::max(j0, p.k0);
  int64_t flops = 0;
  // (h, kLdk) K^T and V^T of the tile; columns past j1 are zero
  for (int64_t d = 0; d < h; ++d) {
    for (int64_t j = 0; j < kLdk; ++j) {
      w.kt[d * kLdk + j] = 0.0f;
      w.vt[d * kLdk + j] = 0.0f;
    }
  }
  auto transpose_rows = [&](float* dst, FloatData src) {
    with_data(src + (ja - p.k0) * p.ldkv_g + g * h, [&](const auto* x) {
      for (int64_t j = 0; j < j1 - ja; ++j)
        for (int64_t d = 0; d < h; ++d) dst[d * kLdk + (ja - j0) + j] = load(x[j * p.ldkv_g + d]);
    });
  };
  transpose_rows(w.kt, t.k);
  transpose_rows(w.vt, t.v);
  // Where rows [ja, j1) of dk and dv (kv head g) accumulate: in place when F32; when BF16, in
  // fp32 tiles that start from their widened values and are rounded once at the end.
  struct Rows {
    float* p;    // row ja
    int64_t ld;  // row stride
  };
  auto accumulator = [&](FloatData x, float* tile) {
    if (!x.bf16) return Rows{x.f32() + (ja - p.k0) * p.ldkv_g + g * h, p.ldkv_g};
    pack_rows(tile, ldh, x + (ja - p.k0) * p.ldkv_g + g * h, p.ldkv_g, j1 - ja, h, 1.0f);
    return Rows{tile, ldh};
  };
  const Rows dk = accumulator(t.dk, w.dka), dv = accumulator(t.dv, w.dva);
  // First query block whose last row reaches the tile.
  const int64_t ib_first = std::max<int64_t>(0, (j0 - p.q_offset) / kBq);
  for (int64_t hq = g * p.group; hq < (g + 1) * p.group; ++hq) {
    for (int64_t ib = ib_first; ib < p.n_blocks; ++ib) {
      const BlockRange b = block_range(p, ib);
      if (b.kmin > j1 - 1) break;  // first keys only move forward: later blocks see even less
      if (b.kmax < j0 || b.kmin / kBk > tile) continue;
      const KeyRange kr = key_range(p, b, tile);
      const int64_t nk = kr.je - kr.js;
      if (nk <= 0) continue;
      const int64_t nkp = round_up(nk, 8);
      const int64_t joff = kr.js - j0;
      const int64_t off = b.r0 * p.ldq_g + hq * h;
      load_row_info(p, b, w);
      load_row_stats(p, t, hq, b, w);
      // (nr, h) scale * Q, Q and dO of the block, natural rows
      pack_rows(w.qs, ldh, t.q + off, p.ldq_g, b.nr, h, p.scale);
      pack_rows(w.qn, ldh, t.q + off, p.ldq_g, b.nr, h, 1.0f);
      pack_rows(w.don, ldh, t.dout + off, p.ldq_g, b.nr, h, 1.0f);
      const MaskGeometry mg{w.lo, b.gi0, b.nr, kr.js, nk};
      const QueryRowsKeyCols score_terms{{}, mg};
      // (nr, nkp) S = Qs K^T and dP = dO V^T
      flops += tile_gemm<Store::kSet>(b.nr, nkp, h, w.qs, ldh, 1, w.kt + joff, kLdk, w.s, kLdk,
                                      nullptr, score_terms);
      flops += tile_gemm<Store::kSet>(b.nr, nkp, h, w.don, ldh, 1, w.vt + joff, kLdk, w.ds, kLdk,
                                      nullptr, score_terms);
      ds_query_major(w, p, b.nr, nkp, kr.js, kr.full);
      // (nk, h) dV += P^T dO and dK += dS^T Q; A(j, i) = s[i, j]
      const KeyRowsQuerySteps terms{{}, mg};
      const int64_t jr = kr.js - ja;  // accumulator row of key kr.js (>= 0: kr.js >= k0)
      flops += tile_gemm<Store::kAdd>(nk, h, b.nr, w.s, 1, kLdk, w.don, ldh, dv.p + jr * dv.ld,
                                      dv.ld, nullptr, terms);
      flops += tile_gemm<Store::kAdd>(nk, h, b.nr, w.ds, 1, kLdk, w.qn, ldh, dk.p + jr * dk.ld,
                                      dk.ld, nullptr, terms);
    }
  }
  for (int64_t j = 0; j < j1 - ja; ++j) {
    const int64_t off = (ja - p.k0 + j) * p.ldkv_g + g * h;
    if (t.dk.bf16) store_row(t.dk + off, dk.p + j * ldh, h, 1.0f, /*add=*/false);
    if (t.dv.bf16) store_row(t.dv + off, dv.p + j * ldh, h, 1.0f, /*add=*/false);
  }
  return flops;
}

// ---------------------------------------------------------------------------------------------
// Entry: the call's shapes, dtypes and scalars are checked by check_attention_forward /
// check_attention_backward (backend_checks.h) before this runs.

Problem make_problem(const char* fn, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& seg_start, int64_t q_offset, const AttentionDims& dims) {
  const std::string where = std::string(fn) + ": ";
  Problem p;
  p.H = dims.n_heads;
  p.G = dims.n_kv_heads;
  p.h = dims.head_dim;
  p.group = p.H / p.G;
  p.scale = dims.scale;
  p.ldq_g = p.H * p.h;
  p.ldkv_g = p.G * p.h;
  p.ldh = round_up(p.h, 16) + 16;
  p.n = q.rows();
  p.tk = k.rows();
  p.k0 = dims.k_offset;
  p.q_offset = q_offset;
  p.n_blocks = (p.n + kBq - 1) / kBq;
  p.seg = seg_start.i32();
  p.window = dims.window;
  if (p.n > 0) {
    SBP_CHECK(q.data && k.data && v.data && p.seg, where + "tensors have no data");
  }
  // Bad segment starts would make the kernel read outside k and v: check the rows we use,
  // here where the data is, before the parallel loops.
  for (int64_t r = q_offset; r < q_offset + p.n; ++r) {
    const int64_t s = p.seg[r];
    const bool ok = s >= 0 && s <= r && (r == q_offset || s >= p.seg[r - 1]);
    SBP_CHECK(ok, where + "seg_start[" + std::to_string(r) + "] = " + std::to_string(s) +
                      " must satisfy 0 <= seg_start[i] <= i and be non-decreasing");
  }
  // First keys are non-decreasing: the first row's is the smallest any row reads (backend.h's
  // window condition implies it; checked here where the data is, as the reads rely on it).
  SBP_CHECK(p.n == 0 || p.first_key(q_offset) >= p.k0,
            where + "query row " + std::to_string(q_offset) + " sees keys below the key offset " +
                std::to_string(p.k0));
  return p;
}

std::vector<Scratch> make_scratch(const Problem& p, int threads) {
  std::vector<Scratch> s;
  s.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) s.emplace_back(p.h, p.ldh);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                       const AttentionDims& dims, int64_t* flops) {
  // Called directly (tests, tools/bench) as well as by CpuBackend, whose Backend base has run
  // the same check already: a few comparisons, repeated for one entry point less to trust.
  check_attention_forward(out, lse, q, k, v, seg_start, q_offset, dims);
  const Problem p = make_problem("attention_forward", q, k, v, seg_start, q_offset, dims);
  if (p.n == 0) return;
  const FwdTensors t{FloatData::of(out), lse.f32(), FloatData::of(q), FloatData::of(k),
                     FloatData::of(v)};

  const int threads = omp_get_max_threads();
  std::vector<Scratch> scratch = make_scratch(p, threads);
  const int64_t tasks = p.H * p.n_blocks;
  int64_t total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    Scratch& w = scratch[static_cast<size_t>(omp_get_thread_num())];
    // Late query blocks see the most keys: hand them out first for a short tail.
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t ib = p.n_blocks - 1 - task / p.H;
      const int64_t hq = task % p.H;
      total += forward_block(p, t, hq, ib, w);
    }
  }
  if (flops) *flops += total;
}

void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& seg_start, int64_t q_offset,
                        const AttentionDims& dims, int64_t* flops) {
  check_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seg_start, q_offset, dims);
  const Problem p = make_problem("attention_backward", q, k, v, seg_start, q_offset, dims);
  if (p.n == 0) return;
  const BwdTensors t{FloatData::of(dq),   FloatData::of(dk),  FloatData::of(dv),
                     FloatData::of(dout), FloatData::of(q),   FloatData::of(k),
                     FloatData::of(v),    FloatData::of(out), lse.f32()};

  const int threads = omp_get_max_threads();
  std::vector<Scratch> scratch = make_scratch(p, threads);
  int64_t total = 0;
  // One pass costs 5 tile products per pair but only G tasks; two passes cost 7 but split
  // finely. Take the one pass unless too few kv heads leave threads idle: its time goes as
  // 5 * ceil(G / threads) / G against 7 / threads.
  // A BF16 dk or dv, or a BF16 out (exact D), needs the two passes (see the top of the file).
  const int64_t rounds = (p.G + threads - 1) / threads;
  const bool per_kv_head =
      5 * rounds * threads <= 7 * p.G && !t.dk.bf16 && !t.dv.bf16 && !t.out.bf16;
  // Both paths add the same terms in the same order into every dq, dk and dv element (the
  // per-element arithmetic is identical; see backward_key_tile), so the result does not
  // depend on the thread count.
  if (per_kv_head) {
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      Scratch& w = scratch[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic)
      for (int64_t g = 0; g < p.G; ++g) {
        for (int64_t hq = g * p.group; hq < (g + 1) * p.group; ++hq)
          for (int64_t ib = 0; ib < p.n_blocks; ++ib)
            total += backward_query_block(p, t, hq, ib, w, /*need_dkdv=*/true);
      }
    }
  } else {
    // Pass B visits every query block once per key tile it sees, so D is computed once here
    // (recomputing it per visit, from dout and out rows scattered in memory, made the two-pass
    // backward a third slower). An (n, H) buffer, the size of lse: the one allocation of this
    // file that grows with n.
    std::unique_ptr<float[]> d_store =
        std::make_unique_for_overwrite<float[]>(static_cast<size_t>(p.n * p.H));
    float* d_rows = d_store.get();
    BwdTensors ta = t, tb = t;  // pass A, pass B
    if (t.out.bf16)
      ta.d_exact = d_rows;  // pass A sums D (see the top of the file)
    else
      ta.d = d_rows;
    tb.d = d_rows;
    const int64_t q_tasks = p.H * p.n_blocks;
    // Key tiles that any query can see: from the first row's first key to the last query
    // (every row sees its own key, so the tiles in between are all seen).
    const int64_t tile_lo = p.first_key(p.q_offset) / kBk;
    const int64_t tile_hi = (p.q_offset + p.n - 1) / kBk;
    const int64_t k_tasks = p.G * (tile_hi - tile_lo + 1);
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      Scratch& w = scratch[static_cast<size_t>(omp_get_thread_num())];
      if (!t.out.bf16) {  // the same branch in every thread
#pragma omp for schedule(static)
        for (int64_t row = 0; row < p.n; ++row)
          for (int64_t hq = 0; hq < p.H; ++hq) d_rows[row * p.H + hq] = row_d(p, t, row, hq, w);
      }
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < q_tasks; ++task) {
        const int64_t ib = p.n_blocks - 1 - task / p.H;
        const int64_t hq = task % p.H;
        total += backward_query_block(p, ta, hq, ib, w, /*need_dkdv=*/false);
      }
      // Early key tiles are seen by the most queries: first.
#pragma omp for schedule(dynamic)
      for (int64_t task = 0; task < k_tasks; ++task) {
        const int64_t tile = tile_lo + task / p.G;
        const int64_t g = task % p.G;
        total += backward_key_tile(p, tb, g, tile, w);
      }
    }
  }
  if (flops) *flops += total;
}

}  // namespace SBP_ATTENTION_NAMESPACE
