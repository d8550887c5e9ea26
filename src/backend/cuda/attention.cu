// Attention forward and backward: our own kernels, not cuDNN's fused attention. Why:
//  - the contract's mask is per row: key j is visible to query i when
//    max(seg_start[i], i - window + 1) <= j <= i, with the queries a row range [q_offset,
//    q_offset + n) of a longer key stream (StreamBP's chunks). cuDNN's SDPA graph takes
//    per-sequence lengths/offsets (ragged tensors) and a causal or sliding-window mask aligned
//    at the sequence start, not arbitrary per-row segment starts plus a query offset into the
//    keys, so every chunk would need repacking into sequences;
//  - its backward sums dK/dV with atomics (non-deterministic), and the contract wants the same
//    bits for the same inputs;
//  - F32 and BF16 tensors in any mix (dK/dV accumulators are F32 while q is BF16).
// These kernels are the simple ones: deterministic fp32 arithmetic on fp32 copies in shared
// memory, on the CUDA cores. attention_tc.cu has the same loops on the tensor cores; it runs
// whenever it can (head_dim % 16 == 0, <= 256), unless STREAMBP_CUDA_ATTENTION=simt asks for
// these (CudaBackend's constructor).
//
// Layout: q, out, dq, dout (n, H*h); k, v, dk, dv (Tk, G*h); lse (n, H) F32. Query head hq reads
// kv head hq / (H / G). Keys are visited in tiles of 32 (one key per lane).
//  - forward: one warp per query row, kRows rows per block, one block per (row group, head);
//    online softmax over the key tiles from the first row's first visible key to the last
//    row: tiles outside the window/segment are never loaded (work goes as n * window);
//  - backward: D_i = sum_j P_ij dP_ij per (row, head) first (delta kernels: rowsum(dout * out)
//    when out is F32, else from P and dP as the contract asks); then a dQ kernel shaped like the
//    forward, and a dK/dV kernel with one warp per (key tile, kv head) that walks the query
//    rows that see the tile in increasing order, for each query head of its group. Each output
//    element is owned by one thread and summed in a fixed order: deterministic, no atomics.
#include "backend/cuda/attention_args.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"

namespace sbp {

namespace {

using cuda::AttnArgs;
using cuda::FPtr;
using cuda::fptr;

constexpr int kTile = 32;        // keys per tile: one per lane
constexpr int kRows = 8;         // query rows (warps) per block in the row kernels
constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / 32;  // head-dim elements a lane owns (d = lane + 32 t)

// Shared memory of the row kernels: K and V tiles (32, h + 1) (padded: lane-per-key reads hit
// distinct banks), two row buffers (kRows, h), and (kRows, 32) per-lane values.
size_t row_kernel_smem(int h) {
  return sizeof(float) * (2 * kTile * (h + 1) + 2 * kRows * h + kRows * kTile);
}
// dK/dV kernel: K, V tiles and dK, dV accumulators (32, h + 1), q and dout rows (h).
size_t kv_kernel_smem(int h) { return sizeof(float) * (4 * kTile * (h + 1) + 2 * h); }

// The row kernels' common frame.
struct RowFrame {
  int warp, lane, hq, g;
  int64_t r, i, lo;  // this warp's row (local, global) and its first visible key
  bool valid;
  int64_t i_last, k_begin;  // the block's last global row, its first key tile start
};

__device__ RowFrame row_frame(const AttnArgs& a) {
  RowFrame f;
  f.warp = threadIdx.x / 32;
  f.lane = threadIdx.x % 32;
  f.hq = blockIdx.y;
  f.g = f.hq / (a.H / a.G);
  const int64_t r0 = blockIdx.x * int64_t{kRows};
  f.r = r0 + f.warp;
  f.valid = f.r < a.n;
  f.i = a.q_offset + f.r;
  f.lo = f.valid ? cuda::first_key(a.seg[f.i], f.i, a.window) : 0;
  const int64_t r_last = min(r0 + kRows, a.n) - 1;
  f.i_last = a.q_offset + r_last;
  const int64_t i_first = a.q_offset + r0;
  // first_key is non-decreasing in i: the block's first row has the smallest.
  f.k_begin = cuda::first_key(a.seg[i_first], i_first, a.window) / kTile * kTile;
  return f;
}

// Loads keys [k0, k0 + 32) of kv head g into Kt and Vt (zeros past `k_last`).
__device__ void load_kv_tile(float* Kt, float* Vt, const AttnArgs& a, int g, int64_t k0,
                             int64_t k_last) {
  const int h = a.h, ld = h + 1;
  const int64_t ldkv = int64_t{a.G} * h;
  for (int e = threadIdx.x; e < kTile * h; e += blockDim.x) {
    const int jj = e / h, d = e % h;
    const int64_t j = k0 + jj;
    const bool in = j <= k_last;
    Kt[jj * ld + d] = in ? a.k.ld(j * ldkv + g * h + d) : 0.0f;
    Vt[jj * ld + d] = in ? a.v.ld(j * ldkv + g * h + d) : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float* x, const float* y, int h) {
  float s = 0.0f;
  for (int d = 0; d < h; ++d) s += x[d] * y[d];
  return s;
}

__global__ void attn_forward_kernel(AttnArgs a) {
  extern __shared__ float sm[];
  const int h = a.h, ld = h + 1;
  float* Kt = sm;
  float* Vt = Kt + kTile * ld;
  float* Qs = Vt + kTile * ld;      // (kRows, h) scaled q rows
  float* Ps = Qs + 2 * kRows * h;   // (kRows, 32)
  const RowFrame f = row_frame(a);
  const int64_t ldq = int64_t{a.H} * h;
  float* qs = Qs + f.warp * h;
  float* ps = Ps + f.warp * kTile;
  if (f.valid)
    for (int d = f.lane; d < h; d += 32) qs[d] = a.scale * a.q.ld(f.r * ldq + f.hq * h + d);
  float acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t k0 = f.k_begin; k0 <= f.i_last; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_kv_tile(Kt, Vt, a, f.g, k0, f.i_last);
    __syncthreads();
    if (!f.valid || k0 > f.i || k0 + kTile - 1 < f.lo) continue;  // no visible key in the tile
    const int64_t j = k0 + f.lane;
    const float s = (j >= f.lo && j <= f.i) ? dot_row(qs, Kt + f.lane * ld, h) : -INFINITY;
    const float m_new = fmaxf(m, cuda::warp_max(s));
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    const float corr = cuda::rescale(m, m_new);
    l = l * corr + cuda::warp_sum(p);
    ps[f.lane] = p;
    __syncwarp();
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = f.lane + 32 * t;
      if (d < h) {
        float o = acc[t] * corr;
        for (int jj = 0; jj < kTile; ++jj) o += ps[jj] * Vt[jj * ld + d];
        acc[t] = o;
      }
    }
    __syncwarp();
    m = m_new;
  }
  if (!f.valid) return;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int d = f.lane + 32 * t;
    if (d < h) a.out.st(f.r * ldq + f.hq * h + d, acc[t] / l);
  }
  if (f.lane == 0) a.lse[f.r * a.H + f.hq] = m + logf(l);
}

// D = rowsum(dout * out), out F32 (the forward's unrounded output).
__global__ void attn_delta_dot_kernel(AttnArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * int64_t{kRows} + warp;
  if (r >= a.n) return;
  const int hq = blockIdx.y, h = a.h;
  const int64_t base = r * a.H * int64_t{h} + hq * int64_t{h};
  float s = 0.0f;
  for (int d = lane; d < h; d += 32) s += a.dout.ld(base + d) * a.out.ld(base + d);
  s = cuda::warp_sum(s);
  if (lane == 0) a.D[r * a.H + hq] = s;
}

// D = sum_j P_ij dP_ij from the probabilities (out BF16: rowsum(dout * out) would carry out's
// rounding, backend.h). Shaped like the forward; each lane sums its keys in tile order.
// kDq: the dQ kernel instead, which needs D (computed before) and the same per-pair values.
template <bool kDq>
__global__ void attn_rows_backward_kernel(AttnArgs a) {
  extern __shared__ float sm[];
  const int h = a.h, ld = h + 1;
  float* Kt = sm;
  float* Vt = Kt + kTile * ld;
  float* Qs = Vt + kTile * ld;  // (kRows, h) scaled q rows, then (kRows, h) dout rows
  float* Ps = Qs + 2 * kRows * h;
  const RowFrame f = row_frame(a);
  const int64_t ldq = int64_t{a.H} * h;
  float* qs = Qs + f.warp * h;
  float* dos = Qs + kRows * h + f.warp * h;
  float* ps = Ps + f.warp * kTile;
  float L = 0.0f, Di = 0.0f;
  if (f.valid) {
    for (int d = f.lane; d < h; d += 32) {
      qs[d] = a.scale * a.q.ld(f.r * ldq + f.hq * h + d);
      dos[d] = a.dout.ld(f.r * ldq + f.hq * h + d);
    }
    L = a.lse[f.r * a.H + f.hq];
    if (kDq) Di = a.D[f.r * a.H + f.hq];
  }
  float acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  float dsum = 0.0f;  // delta mode: this lane's sum of P dP
  for (int64_t k0 = f.k_begin; k0 <= f.i_last; k0 += kTile) {
    __syncthreads();
    load_kv_tile(Kt, Vt, a, f.g, k0, f.i_last);
    __syncthreads();
    if (!f.valid || k0 > f.i || k0 + kTile - 1 < f.lo) continue;
    const int64_t j = k0 + f.lane;
    float p = 0.0f, dp = 0.0f;
    if (j >= f.lo && j <= f.i) {
      p = expf(dot_row(qs, Kt + f.lane * ld, h) - L);
      dp = dot_row(dos, Vt + f.lane * ld, h);
    }
    if constexpr (!kDq) {
      dsum += p * dp;
    } else {
      ps[f.lane] = cuda::attn_ds(p, dp, Di);
      __syncwarp();
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int d = f.lane + 32 * t;
        if (d < h) {
          float o = acc[t];
          for (int jj = 0; jj < kTile; ++jj) o += ps[jj] * Kt[jj * ld + d];
          acc[t] = o;
        }
      }
      __syncwarp();
    }
  }
  if (!f.valid) return;
  if constexpr (!kDq) {
    dsum = cuda::warp_sum(dsum);
    if (f.lane == 0) a.D[f.r * a.H + f.hq] = dsum;
  } else {
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = f.lane + 32 * t;
      if (d < h) a.dq.add(f.r * ldq + f.hq * h + d, a.scale * acc[t]);
    }
  }
}

// dK, dV of keys [32 b, 32 b + 32) of kv head g: one warp, lane jj owns key 32 b + jj.
__global__ void attn_dkdv_kernel(AttnArgs a) {
  extern __shared__ float sm[];
  const int h = a.h, ld = h + 1, lane = threadIdx.x;
  float* Kt = sm;
  float* Vt = Kt + kTile * ld;
  float* dKa = Vt + kTile * ld;
  float* dVa = dKa + kTile * ld;
  float* qs = dVa + kTile * ld;
  float* dos = qs + h;
  const int g = blockIdx.y, group = a.H / a.G;
  const int64_t q_end = a.q_offset + a.n;
  const int64_t k0 = blockIdx.x * int64_t{kTile};
  const int64_t k_last = min(k0 + kTile, q_end) - 1;
  const int64_t i_begin = max(k0, a.q_offset);
  if (i_begin >= q_end) return;
  // first_key(i) is non-decreasing in i: if the first candidate row's first visible key is past
  // the tile, so is every later row's, and no query sees the tile.
  if (cuda::first_key(a.seg[i_begin], i_begin, a.window) > k_last) return;
  load_kv_tile(Kt, Vt, a, g, k0, k_last);
  for (int e = lane; e < kTile * ld; e += 32) {
    dKa[e] = 0.0f;
    dVa[e] = 0.0f;
  }
  __syncwarp();
  const int64_t ldq = int64_t{a.H} * h;
  const int64_t j = k0 + lane;
  float* kj = Kt + lane * ld;
  float* vj = Vt + lane * ld;
  float* dkj = dKa + lane * ld;
  float* dvj = dVa + lane * ld;
  for (int hq = g * group; hq < (g + 1) * group; ++hq) {
    for (int64_t i = i_begin; i < q_end; ++i) {
      const int64_t lo = cuda::first_key(a.seg[i], i, a.window);
      if (lo > k_last) break;  // and so for every later row
      const int64_t r = i - a.q_offset;
      __syncwarp();  // the previous row's qs, dos are no longer read
      for (int d = lane; d < h; d += 32) {
        qs[d] = a.scale * a.q.ld(r * ldq + hq * h + d);
        dos[d] = a.dout.ld(r * ldq + hq * h + d);
      }
      __syncwarp();
      if (j < lo || j > i || j > k_last) continue;
      const float p = expf(dot_row(qs, kj, h) - a.lse[r * a.H + hq]);
      const float ds = cuda::attn_ds(p, dot_row(dos, vj, h), a.D[r * a.H + hq]);
      for (int d = 0; d < h; ++d) {
        dvj[d] += p * dos[d];
        dkj[d] += ds * qs[d];  // qs carries the softmax scale: dk = scale * sum ds q
      }
    }
  }
  __syncwarp();
  const int64_t ldkv = int64_t{a.G} * h;
  for (int e = lane; e < kTile * h; e += 32) {  // coalesced: consecutive lanes, consecutive d
    const int jj = e / h, d = e % h;
    const int64_t jr = k0 + jj;
    if (jr > k_last) break;
    a.dk.add(jr * ldkv + g * h + d, dKa[jj * ld + d]);
    a.dv.add(jr * ldkv + g * h + d, dVa[jj * ld + d]);
  }
}

AttnArgs args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& seg_start,
              int64_t q_offset, const AttentionDims& dims) {
  AttnArgs a;
  a.q = fptr(q);
  a.k = fptr(k);
  a.v = fptr(v);
  a.seg = seg_start.i32();
  a.n = q.rows();
  a.q_offset = q_offset;
  a.window = dims.window;
  a.H = static_cast<int>(dims.n_heads);
  a.G = static_cast<int>(dims.n_kv_heads);
  a.h = static_cast<int>(dims.head_dim);
  a.scale = dims.scale;
  return a;
}

void check_head_dim(const char* op, const AttentionDims& dims) {
  // A capability of this backend (backend.h allows backends to compute less than the contract).
  SBP_CHECK(dims.head_dim <= kMaxHeadDim && dims.n_heads < 65536,
            std::string(op) + ": the CUDA attention kernels handle head_dim <= 256 and fewer "
                              "than 65536 heads, not head_dim " +
                std::to_string(dims.head_dim));
}

}  // namespace

void CudaBackend::attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q,
                                         const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                         int64_t q_offset, const AttentionDims& dims) {
  check_head_dim("attention_forward", dims);
  const int64_t n = q.rows();
  const int64_t pairs = check_segments("attention_forward", seg_start, q_offset, n, dims.window);
  flops_ += 4 * dims.head_dim * dims.n_heads * pairs;  // Q K^T and P V per visible pair
  if (n == 0) return;
  AttnArgs a = args(q, k, v, seg_start, q_offset, dims);
  a.out = fptr(out);
  a.lse = lse.f32();
  if (use_tensor_core_attention(a.h)) {
    cuda::tc_attention_forward(a, smem_optin_, stream_);
    return;
  }
  const dim3 grid(static_cast<unsigned>((n + kRows - 1) / kRows), static_cast<unsigned>(a.H));
  cuda::launch_attention(attn_forward_kernel, grid, 32 * kRows, row_kernel_smem(a.h), stream_,
                         a);
}

void CudaBackend::attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                          const Tensor& dout, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& out, const Tensor& lse,
                                          const Tensor& seg_start, int64_t q_offset,
                                          const AttentionDims& dims) {
  check_head_dim("attention_backward", dims);
  const int64_t n = q.rows();
  const int64_t pairs = check_segments("attention_backward", seg_start, q_offset, n, dims.window);
  const bool d_from_p = out.dtype != DType::F32;
  // Per visible pair: dQ kernel S, dP, dQ; dK/dV kernel S, dP, dV, dK; with a BF16 out the
  // delta kernel's S and dP as well.
  flops_ += (d_from_p ? 18 : 14) * dims.head_dim * dims.n_heads * pairs;
  if (n == 0) return;
  AttnArgs a = args(q, k, v, seg_start, q_offset, dims);
  a.out = fptr(out);
  a.dout = fptr(dout);
  a.dq = fptr(dq);
  a.dk = fptr(dk);
  a.dv = fptr(dv);
  a.lse = lse.f32();
  a.D = static_cast<float*>(scratch(kScratchA, sizeof(float) * n * a.H));
  const dim3 rows(static_cast<unsigned>((n + kRows - 1) / kRows), static_cast<unsigned>(a.H));
  const bool tensor_cores = use_tensor_core_attention(a.h);
  if (!d_from_p) {
    cuda::launch_attention(attn_delta_dot_kernel, rows, 32 * kRows, 0, stream_, a);
  } else if (!tensor_cores) {  // the tensor-core backward sums D from P and dP itself
    cuda::launch_attention(attn_rows_backward_kernel<false>, rows, 32 * kRows,
                           row_kernel_smem(a.h), stream_, a);
  }
  if (tensor_cores) {
    cuda::tc_attention_backward(a, d_from_p, smem_optin_, stream_);
    return;
  }
  cuda::launch_attention(attn_rows_backward_kernel<true>, rows, 32 * kRows, row_kernel_smem(a.h),
                         stream_, a);
  const int64_t key_tiles = (q_offset + n + kTile - 1) / kTile;
  const dim3 kv(static_cast<unsigned>(key_tiles), static_cast<unsigned>(a.G));
  cuda::launch_attention(attn_dkdv_kernel, kv, 32, kv_kernel_smem(a.h), stream_, a);
}

}  // namespace sbp
