// Attention forward and backward on the tensor cores (WMMA, TF32 inputs, fp32 accumulation),
// with the fp32 kernels' results: the products run as split TF32 (kernel_math.h tf32_split).
// Why TF32 and not BF16 inputs: the engine's q, k, v may be BF16 but dout, P and dS are fp32,
// and the contract (and the op suite) wants F32 results to fp32 accuracy. A BF16 value is a
// TF32 value, so a BF16 operand enters one product exactly; an fp32 one (dout, P, dS, an F32
// q/k/v) enters as hi + lo, and a b = a_hi b_hi + a_hi b_lo + a_lo b_hi is within ~2^-21 of
// a b. Cost: 1 MMA for q k^T from BF16 q, k; 2 for P V, dP = dout v^T, dS K, dS^T q; 3 for
// P^T dout. TF32 tensor cores run at half the BF16 rate, still far above fp32 CUDA cores.
//
// Kernel shape (FlashAttention-2's loops), W warps per block, 16 rows (or keys) per warp:
//  - forward: a block owns 16 W query rows of one head and walks the key tiles of 32 from its
//    first row's first visible key to its last row; each warp computes its S (16, 32) = Q K^T,
//    the online softmax (two lanes per row), O = O * corr + P V, all in shared memory (WMMA's
//    register layout is opaque, so accumulators that need per-row rescaling live in shared
//    memory and are loaded into fragments per tile);
//  - backward: D (from P and dP when out is BF16, backend.h), then a dQ kernel shaped like the
//    forward, then a dK/dV kernel whose block owns 16 W keys of one kv head and walks the
//    query tiles of 32 rows (every query head of its group, in order) that see them.
// Every output element is owned by one block and summed in a fixed order: deterministic, no
// atomics. Tiles nobody in a warp sees are skipped by that warp (causal and window masks);
// partially visible tiles are masked per element.
#include <mma.h>  // nvcc's, or the emulation build's (emulation/mma.h)

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention_args.cuh"

namespace sbp::cuda {

namespace {

using namespace nvcuda;

constexpr int kBc = 32;  // keys per tile (row kernels), query rows per tile (dK/dV kernel)
constexpr int kPad = 4;  // floats of padding per shared row: ld % 32 != 0 spreads the banks
constexpr int kLdS = kBc + kPad;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

// hi <- tf32(x), lo <- tf32(x - hi) elementwise (fragment elements are independent values).
template <class Frag>
__device__ __forceinline__ void split(Frag& hi, Frag& lo, bool with_lo) {
  for (int t = 0; t < hi.num_elements; ++t) {
    const Tf32Split s = tf32_split(hi.x[t]);
    hi.x[t] = s.hi;
    if (with_lo) lo.x[t] = s.lo;
  }
}

// acc (16, 16) += A (16, K) B (K, 16), A row-major at `a` (lda), B at `b` (ldb): row-major
// (b[k * ldb + n]) or column-major (b[n * ldb + k], i.e. B = M^T for a row-major M (16, K)).
// a_split / b_split: the operand is not TF32-exact (fp32 data) and enters as hi + lo.
// Pointers 32-byte aligned, lda/ldb multiples of 4, K a multiple of 8.
template <bool kBRowMajor>
__device__ __forceinline__ void mma_acc(FragC& acc, const float* a, int lda, const float* b,
                                        int ldb, int K, bool a_split, bool b_split) {
  using FragB = std::conditional_t<kBRowMajor, FragBRow, FragBCol>;
  FragA ah, al;
  FragB bh, bl;
  for (int k = 0; k < K; k += 8) {
    wmma::load_matrix_sync(ah, a + k, lda);
    wmma::load_matrix_sync(bh, kBRowMajor ? b + int64_t{k} * ldb : b + k, ldb);
    split(ah, al, a_split);
    split(bh, bl, b_split);
    if (a_split) wmma::mma_sync(acc, al, bh, acc);  // small terms first
    if (b_split) wmma::mma_sync(acc, ah, bl, acc);
    wmma::mma_sync(acc, ah, bh, acc);
  }
}

// C (16, 16 nf) = A (16, K) M^T for M row-major (16 nf, K) at m (ldm): scores S = Q K^T and
// dP = dout V^T of one warp, stored row-major to c (ldc).
__device__ __forceinline__ void mma_abt(float* c, int ldc, int nf, const float* a, int lda,
                                        const float* m, int ldm, int K, bool a_split,
                                        bool m_split) {
  for (int f = 0; f < nf; ++f) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_acc<false>(acc, a, lda, m + int64_t{16} * f * ldm, ldm, K, a_split, m_split);
    wmma::store_matrix_sync(c + 16 * f, acc, ldc, wmma::mem_row_major);
  }
}

// C (16, h) += A (16, kBc) B (kBc, h), C in shared memory (ldc), B row-major (ldb): O += P V,
// dQ += dS K, dV += P^T dout, dK += dS^T q of one warp.
__device__ __forceinline__ void mma_acc_rows(float* c, int ldc, int h, const float* a, int lda,
                                             const float* b, int ldb, bool a_split, bool b_split) {
  for (int f = 0; f < h / 16; ++f) {
    FragC acc;
    wmma::load_matrix_sync(acc, c + 16 * f, ldc, wmma::mem_row_major);
    mma_acc<true>(acc, a, lda, b + 16 * f, ldb, kBc, a_split, b_split);
    wmma::store_matrix_sync(c + 16 * f, acc, ldc, wmma::mem_row_major);
  }
}

// dst (rows, h) at ld <- rows [row0, row0 + rows) of src (stride floats per row, column
// offset col) as fp32; rows outside [0, row_end) are zeros. All threads of the block.
// Rows below `src_row0` are not in src (a key offset: src's first row is row src_row0) and
// load as zeros too.
__device__ void load_rows(float* dst, int ld, FPtr src, int64_t row0, int64_t row_end, int rows,
                          int64_t stride, int64_t col, int h, int64_t src_row0 = 0) {
  for (int e = threadIdx.x; e < rows * h; e += blockDim.x) {
    const int rr = e / h, d = e % h;
    const int64_t row = row0 + rr;
    const bool in = row >= src_row0 && row < row_end;
    dst[rr * ld + d] = in ? src.ld((row - src_row0) * stride + col + d) : 0.0f;
  }
}

__device__ void zero(float* p, int count) {
  for (int e = threadIdx.x; e < count; e += blockDim.x) p[e] = 0.0f;
}

// The row kernels' frame: a block of 16 W query rows [r0, r_end) of head hq; lane pairs own a
// row of their warp (rr = lane / 2) and half of each tile's columns (half = lane % 2).
struct Rows {
  int warp, lane, rr, half, hq, g;
  int64_t r0, r_end;        // block rows (local), r_end exclusive and <= n
  int64_t r;                // this lane's row (local)
  bool valid;               // r < n
  int64_t i, lo;            // its global row and first visible key
  bool warp_any;            // the warp has a row < n
  int64_t w_lo, w_hi;       // the warp's visible key range (first row's first key, last row)
  int64_t k_begin, i_last;  // the block's first key tile start, last global row
};

__device__ Rows rows_frame(const AttnArgs& a, int W) {
  Rows f;
  f.warp = threadIdx.x / 32;
  f.lane = threadIdx.x % 32;
  f.rr = f.lane / 2;
  f.half = f.lane % 2;
  f.hq = blockIdx.y;
  f.g = f.hq / (a.H / a.G);
  f.r0 = blockIdx.x * int64_t{16} * W;
  f.r_end = min(f.r0 + 16 * W, a.n);
  f.r = f.r0 + 16 * f.warp + f.rr;
  f.valid = f.r < a.n;
  f.i = a.q_offset + f.r;
  f.lo = f.valid ? first_key(a.seg[f.i], f.i, a.window) : 0;
  const int64_t w0 = f.r0 + 16 * f.warp;
  f.warp_any = w0 < a.n;
  const int64_t iw = a.q_offset + w0;
  f.w_lo = f.warp_any ? first_key(a.seg[iw], iw, a.window) : 0;
  f.w_hi = a.q_offset + min(w0 + 16, a.n) - 1;
  f.i_last = a.q_offset + f.r_end - 1;
  const int64_t i0 = a.q_offset + f.r0;
  // first_key is non-decreasing in i: the block's first row has the smallest.
  f.k_begin = first_key(a.seg[i0], i0, a.window) / kBc * kBc;
  return f;
}

// Whether this warp sees no key of the tile [k0, k0 + kBc).
__device__ __forceinline__ bool warp_skips(const Rows& f, int64_t k0) {
  return !f.warp_any || k0 > f.w_hi || k0 + kBc - 1 < f.w_lo;
}

// Shared floats of each kernel for W warps and head_dim h.
size_t forward_floats(int W, int h) {
  return size_t(2 * 16 * W + 2 * kBc) * (h + kPad) + size_t(16 * W) * kLdS;
}
size_t rows_backward_floats(int W, int h) {
  return size_t(3 * 16 * W + 2 * kBc) * (h + kPad) + size_t(2 * 16 * W) * kLdS;
}
size_t dkdv_floats(int W, int h) {
  return size_t(4 * 16 * W + 2 * kBc) * (h + kPad) + size_t(2 * 16 * W) * kLdS + 4 * kBc;
}
// The most warps (4, 2, 1) whose shared memory fits; 0 if none does.
template <class Floats>
int warps_for(Floats floats, int h, size_t smem_limit) {
  for (int W = 4; W >= 1; W /= 2)
    if (sizeof(float) * floats(W, h) <= smem_limit) return W;
  return 0;
}

__global__ void tc_forward_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  SBP_DYNAMIC_SHARED(float, sm);
  const int h = a.h, ld = h + kPad, W = blockDim.x / 32;
  const Rows f = rows_frame(a, W);
  float* Qs = sm;                // (16 W, ld) q rows of the block
  float* Os = Qs + 16 * W * ld;  // (16 W, ld) unnormalised output
  float* Ks = Os + 16 * W * ld;  // (kBc, ld) key tile
  float* Vs = Ks + kBc * ld;     // (kBc, ld) value tile
  float* Ss = Vs + kBc * ld;     // (16 W, kLdS) scores, then probabilities
  float* Qw = Qs + 16 * f.warp * ld;
  float* Ow = Os + 16 * f.warp * ld;
  float* Sw = Ss + 16 * f.warp * kLdS;
  const int64_t ldq = int64_t{a.H} * h, ldkv = int64_t{a.G} * h;
  load_rows(Qs, ld, a.q, f.r0, f.r_end, 16 * W, ldq, int64_t{f.hq} * h, h);
  zero(Os, 16 * W * ld);
  float m = -INFINITY, l = 0.0f;  // this row's running max and sum (both lanes of the pair)
  for (int64_t k0 = f.k_begin; k0 <= f.i_last; k0 += kBc) {
    __syncthreads();  // the previous tile is no longer read (and Q, O are written)
    load_rows(Ks, ld, a.k, k0, f.i_last + 1, kBc, ldkv, int64_t{f.g} * h, h, a.k_offset);
    load_rows(Vs, ld, a.v, k0, f.i_last + 1, kBc, ldkv, int64_t{f.g} * h, h, a.k_offset);
    __syncthreads();
    if (warp_skips(f, k0)) continue;
    mma_abt(Sw, kLdS, kBc / 16, Qw, ld, Ks, ld, h, !a.q.bf16, !a.k.bf16);
    __syncwarp();
    float* srow = Sw + f.rr * kLdS + 16 * f.half;
    float tmax = -INFINITY;
    for (int c = 0; c < 16; ++c) {
      const int64_t j = k0 + 16 * f.half + c;
      const float s = (f.valid && j >= f.lo && j <= f.i) ? a.scale * srow[c] : -INFINITY;
      srow[c] = s;
      tmax = fmaxf(tmax, s);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    const float corr = rescale(m, m_new);
    float psum = 0.0f;
    for (int c = 0; c < 16; ++c) {
      const float p = srow[c] == -INFINITY ? 0.0f : expf(srow[c] - m_new);
      srow[c] = p;
      psum += p;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);  // same bits on both lanes: a + b == b + a
    l = l * corr + psum;
    m = m_new;
    float* orow = Ow + f.rr * ld + f.half * (h / 2);
    for (int d = 0; d < h / 2; ++d) orow[d] *= corr;
    __syncwarp();
    mma_acc_rows(Ow, ld, h, Sw, kLdS, Vs, ld, true, !a.v.bf16);
    __syncwarp();
  }
  __syncwarp();
  if (f.valid) {
    float* orow = Ow + f.rr * ld + f.half * (h / 2);
    for (int d = 0; d < h / 2; ++d) orow[d] /= l;
    if (f.half == 0) a.lse[f.r * a.H + f.hq] = m + logf(l);
  }
  __syncwarp();
  const int64_t w0 = f.r0 + 16 * f.warp;
  for (int e = f.lane; e < 16 * h; e += 32) {  // coalesced: consecutive lanes, consecutive d
    const int rr = e / h, d = e % h;
    if (w0 + rr < a.n) a.out.st((w0 + rr) * ldq + int64_t{f.hq} * h + d, Ow[rr * ld + d]);
  }
}

// kDq = false: D_i = sum_j P_ij dP_ij (a BF16 out, backend.h). kDq = true: dq += scale dS K
// with dS = P (dP - D). Shaped like the forward.
template <bool kDq>
__global__ void tc_rows_backward_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  SBP_DYNAMIC_SHARED(float, sm);
  const int h = a.h, ld = h + kPad, W = blockDim.x / 32;
  const Rows f = rows_frame(a, W);
  float* Qs = sm;                   // (16 W, ld)
  float* dOs = Qs + 16 * W * ld;    // (16 W, ld)
  float* Acc = dOs + 16 * W * ld;   // (16 W, ld) dQ / scale
  float* Ks = Acc + 16 * W * ld;    // (kBc, ld)
  float* Vs = Ks + kBc * ld;        // (kBc, ld)
  float* Ss = Vs + kBc * ld;        // (16 W, kLdS) scores, then dS
  float* dPs = Ss + 16 * W * kLdS;  // (16 W, kLdS)
  float* Qw = Qs + 16 * f.warp * ld;
  float* dOw = dOs + 16 * f.warp * ld;
  float* Accw = Acc + 16 * f.warp * ld;
  float* Sw = Ss + 16 * f.warp * kLdS;
  float* dPw = dPs + 16 * f.warp * kLdS;
  const int64_t ldq = int64_t{a.H} * h, ldkv = int64_t{a.G} * h;
  load_rows(Qs, ld, a.q, f.r0, f.r_end, 16 * W, ldq, int64_t{f.hq} * h, h);
  load_rows(dOs, ld, a.dout, f.r0, f.r_end, 16 * W, ldq, int64_t{f.hq} * h, h);
  if (kDq) zero(Acc, 16 * W * ld);
  const float L = f.valid ? a.lse[f.r * a.H + f.hq] : 0.0f;
  const float Di = (kDq && f.valid) ? a.D[f.r * a.H + f.hq] : 0.0f;
  float dsum = 0.0f;  // !kDq: this lane's half of sum_j P dP
  for (int64_t k0 = f.k_begin; k0 <= f.i_last; k0 += kBc) {
    __syncthreads();
    load_rows(Ks, ld, a.k, k0, f.i_last + 1, kBc, ldkv, int64_t{f.g} * h, h, a.k_offset);
    load_rows(Vs, ld, a.v, k0, f.i_last + 1, kBc, ldkv, int64_t{f.g} * h, h, a.k_offset);
    __syncthreads();
    if (warp_skips(f, k0)) continue;
    mma_abt(Sw, kLdS, kBc / 16, Qw, ld, Ks, ld, h, !a.q.bf16, !a.k.bf16);
    mma_abt(dPw, kLdS, kBc / 16, dOw, ld, Vs, ld, h, !a.dout.bf16, !a.v.bf16);
    __syncwarp();
    float* srow = Sw + f.rr * kLdS + 16 * f.half;
    const float* dprow = dPw + f.rr * kLdS + 16 * f.half;
    for (int c = 0; c < 16; ++c) {
      const int64_t j = k0 + 16 * f.half + c;
      const bool seen = f.valid && j >= f.lo && j <= f.i;
      const float p = seen ? expf(a.scale * srow[c] - L) : 0.0f;
      if constexpr (kDq)
        srow[c] = seen ? attn_ds(p, dprow[c], Di) : 0.0f;
      else
        dsum += p * dprow[c];
    }
    if constexpr (kDq) {
      __syncwarp();
      mma_acc_rows(Accw, ld, h, Sw, kLdS, Ks, ld, true, !a.k.bf16);
    }
    __syncwarp();
  }
  if constexpr (!kDq) {
    dsum += __shfl_xor_sync(0xffffffffu, dsum, 1);
    if (f.valid && f.half == 0) a.D[f.r * a.H + f.hq] = dsum;
  } else {
    __syncwarp();
    const int64_t w0 = f.r0 + 16 * f.warp;
    for (int e = f.lane; e < 16 * h; e += 32) {
      const int rr = e / h, d = e % h;
      if (w0 + rr < a.n)
        a.dq.add((w0 + rr) * ldq + int64_t{f.hq} * h + d, a.scale * Accw[rr * ld + d]);
    }
  }
}

// dK, dV of keys [k0, k0 + 16 W) of kv head g (block (key block, g)); warp w owns 16 of them
// and lane pairs one key (rr = lane / 2) and half of each query tile's rows.
__global__ void tc_dkdv_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  SBP_DYNAMIC_SHARED(float, sm);
  const int h = a.h, ld = h + kPad, W = blockDim.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rr = lane / 2, half = lane % 2;
  const int KB = 16 * W;
  float* Kb = sm;                                      // (KB, ld) the block's keys
  float* Vb = Kb + KB * ld;                            // (KB, ld)
  float* dKa = Vb + KB * ld;                           // (KB, ld) dK / scale
  float* dVa = dKa + KB * ld;                          // (KB, ld)
  float* Qt = dVa + KB * ld;                           // (kBc, ld) query tile (one head)
  float* dOt = Qt + kBc * ld;                          // (kBc, ld)
  float* St = dOt + kBc * ld;                          // (KB, kLdS) S^T, then P^T
  float* dPt = St + KB * kLdS;                         // (KB, kLdS) dP^T, then dS^T
  float* Lt = dPt + KB * kLdS;                         // (kBc) lse of the tile's rows
  float* Dt = Lt + kBc;                                // (kBc) D
  int64_t* Ft = reinterpret_cast<int64_t*>(Dt + kBc);  // (kBc) first visible key per row
  const int g = blockIdx.y, group = a.H / a.G;
  const int64_t q_end = a.q_offset + a.n;
  const int64_t k0 = blockIdx.x * int64_t{KB};
  const int64_t k_last = min(k0 + KB, q_end) - 1;  // keys past q_end are seen by no row
  const int64_t i_begin = max(k0, a.q_offset);     // rows before k0 see none of the keys
  if (i_begin >= q_end) return;
  // first_key is non-decreasing: if the first candidate row sees nothing of the block, no
  // later row does.
  if (first_key(a.seg[i_begin], i_begin, a.window) > k_last) return;
  const int64_t ldq = int64_t{a.H} * h, ldkv = int64_t{a.G} * h;
  load_rows(Kb, ld, a.k, k0, k_last + 1, KB, ldkv, int64_t{g} * h, h, a.k_offset);
  load_rows(Vb, ld, a.v, k0, k_last + 1, KB, ldkv, int64_t{g} * h, h, a.k_offset);
  zero(dKa, 2 * KB * ld);
  const int64_t wk0 = k0 + 16 * warp, wk_last = min(wk0 + 15, k_last);
  const int64_t j = wk0 + rr;  // this lane pair's key
  float* Kw = Kb + 16 * warp * ld;
  float* Vw = Vb + 16 * warp * ld;
  float* dKw = dKa + 16 * warp * ld;
  float* dVw = dVa + 16 * warp * ld;
  float* Sw = St + 16 * warp * kLdS;
  float* dPw = dPt + 16 * warp * kLdS;
  for (int hq = g * group; hq < (g + 1) * group; ++hq) {
    for (int64_t t0 = i_begin; t0 < q_end; t0 += kBc) {
      if (first_key(a.seg[t0], t0, a.window) > k_last) break;  // and for every later tile
      __syncthreads();  // the previous tile is no longer read
      const int64_t r0 = t0 - a.q_offset;
      load_rows(Qt, ld, a.q, r0, a.n, kBc, ldq, int64_t{hq} * h, h);
      load_rows(dOt, ld, a.dout, r0, a.n, kBc, ldq, int64_t{hq} * h, h);
      for (int c = threadIdx.x; c < kBc; c += blockDim.x) {
        const int64_t i = t0 + c, r = r0 + c;
        const bool in = i < q_end;
        Lt[c] = in ? a.lse[r * a.H + hq] : 0.0f;
        Dt[c] = in ? a.D[r * a.H + hq] : 0.0f;
        Ft[c] = in ? first_key(a.seg[i], i, a.window) : INT64_MAX;
      }
      __syncthreads();
      const int64_t t_last = min(t0 + kBc, q_end) - 1;
      if (wk0 > k_last || t_last < wk0 || Ft[0] > wk_last) continue;  // the warp sees nothing
      mma_abt(Sw, kLdS, kBc / 16, Kw, ld, Qt, ld, h, !a.k.bf16, !a.q.bf16);
      mma_abt(dPw, kLdS, kBc / 16, Vw, ld, dOt, ld, h, !a.v.bf16, !a.dout.bf16);
      __syncwarp();
      float* prow = Sw + rr * kLdS + 16 * half;
      float* dsrow = dPw + rr * kLdS + 16 * half;
      for (int c = 0; c < 16; ++c) {
        const int cc = 16 * half + c;
        const int64_t i = t0 + cc;
        const bool seen = j <= k_last && i < q_end && j >= Ft[cc] && j <= i;
        const float p = seen ? expf(a.scale * prow[c] - Lt[cc]) : 0.0f;
        dsrow[c] = seen ? attn_ds(p, dsrow[c], Dt[cc]) : 0.0f;
        prow[c] = p;
      }
      __syncwarp();
      mma_acc_rows(dVw, ld, h, Sw, kLdS, dOt, ld, true, !a.dout.bf16);
      mma_acc_rows(dKw, ld, h, dPw, kLdS, Qt, ld, true, !a.q.bf16);
      __syncwarp();
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < KB * h; e += blockDim.x) {
    const int kk = e / h, d = e % h;
    const int64_t jr = k0 + kk;
    if (jr > k_last) break;
    if (jr < a.k_offset) continue;  // seen by no query, and not in dk
    a.dk.add((jr - a.k_offset) * ldkv + int64_t{g} * h + d, a.scale * dKa[kk * ld + d]);
    a.dv.add((jr - a.k_offset) * ldkv + int64_t{g} * h + d, dVa[kk * ld + d]);
  }
}

dim3 row_grid(const AttnArgs& a, int W) {
  return dim3(static_cast<unsigned>((a.n + 16 * W - 1) / (16 * W)), static_cast<unsigned>(a.H));
}

}  // namespace

bool tc_attention_supported(int h, size_t smem_limit) {
  if (h <= 0 || h % 16 != 0 || h > 256) return false;
  return warps_for(forward_floats, h, smem_limit) > 0 &&
         warps_for(rows_backward_floats, h, smem_limit) > 0 &&
         warps_for(dkdv_floats, h, smem_limit) > 0;
}

TcRefusal tc_attention_run(const AttnArgs& a, AttnPhase phase, size_t smem_limit,
                           cudaStream_t stream) {
  TcRefusal r;
  switch (phase) {
    case AttnPhase::forward:
      r.kernel = "tc_forward_kernel";
      r.warps = warps_for(forward_floats, a.h, smem_limit);
      r.smem = sizeof(float) * forward_floats(r.warps, a.h);
      r.error = try_launch_attention(tc_forward_kernel, r.kernel, row_grid(a, r.warps),
                                     32 * r.warps, r.smem, stream, a);
      break;
    case AttnPhase::delta:
    case AttnPhase::dq:
      r.kernel = phase == AttnPhase::delta ? "tc_rows_backward_kernel<false>"
                                           : "tc_rows_backward_kernel<true>";
      r.warps = warps_for(rows_backward_floats, a.h, smem_limit);
      r.smem = sizeof(float) * rows_backward_floats(r.warps, a.h);
      r.error = phase == AttnPhase::delta
                    ? try_launch_attention(tc_rows_backward_kernel<false>, r.kernel,
                                           row_grid(a, r.warps), 32 * r.warps, r.smem, stream, a)
                    : try_launch_attention(tc_rows_backward_kernel<true>, r.kernel,
                                           row_grid(a, r.warps), 32 * r.warps, r.smem, stream, a);
      break;
    case AttnPhase::dkdv: {
      r.kernel = "tc_dkdv_kernel";
      r.warps = warps_for(dkdv_floats, a.h, smem_limit);
      r.smem = sizeof(float) * dkdv_floats(r.warps, a.h);
      const int64_t key_blocks = (a.q_offset + a.n + 16 * r.warps - 1) / (16 * r.warps);
      r.error = try_launch_attention(
          tc_dkdv_kernel, r.kernel,
          dim3(static_cast<unsigned>(key_blocks), static_cast<unsigned>(a.G)), 32 * r.warps,
          r.smem, stream, a);
      break;
    }
  }
  return r;
}

namespace {
void run_or_throw(const AttnArgs& a, AttnPhase phase, size_t smem_limit, cudaStream_t stream) {
  const TcRefusal r = tc_attention_run(a, phase, smem_limit, stream);
  if (r) fail_cuda(r.error, r.kernel, __FILE__, __LINE__);
}
}  // namespace

void tc_attention_forward(const AttnArgs& a, size_t smem_limit, cudaStream_t stream) {
  run_or_throw(a, AttnPhase::forward, smem_limit, stream);
}

void tc_attention_backward(const AttnArgs& a, bool d_from_p, size_t smem_limit,
                           cudaStream_t stream) {
  if (d_from_p) run_or_throw(a, AttnPhase::delta, smem_limit, stream);
  run_or_throw(a, AttnPhase::dq, smem_limit, stream);
  run_or_throw(a, AttnPhase::dkdv, smem_limit, stream);
}

}  // namespace sbp::cuda
