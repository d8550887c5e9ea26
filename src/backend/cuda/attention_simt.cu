// Attention forward and backward on the fp32 CUDA cores: deterministic fp32 arithmetic on fp32
// copies in shared memory. They run for the head dims the tensor-core kernels (attention_tc.cu)
// do not take (head_dim % 16 != 0), and for every head dim with STREAMBP_CUDA_ATTENTION=simt.
// Why our own kernels and not cuDNN's: attention.cu.
//
// Keys are visited in tiles of 32 (one key per lane).
//  - forward: one warp per query row, kRows rows per block, one block per (row group, head);
//    online softmax over the key tiles from the first row's first visible key to the last
//    row: tiles outside the window/segment are never loaded (work goes as n * window);
//  - backward: D_i = sum_j P_ij dP_ij per (row, head) first (delta kernels: rowsum(dout * out)
//    when out is F32, else from P and dP as the contract asks); then a dQ kernel shaped like the
//    forward, and a dK/dV kernel with one warp per (key tile, kv head) that walks the query
//    rows that see the tile in increasing order, for each query head of its group. Each output
//    element is owned by one thread and summed in a fixed order: deterministic, no atomics.
#include <cstdint>

#include "backend/cuda/attention_args.cuh"

namespace sbp::cuda {

namespace {

constexpr int kTile = 32;  // keys per tile: one per lane
constexpr int kRows = 8;   // query rows (warps) per block in the row kernels
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
  f.lo = f.valid ? first_key(a.seg[f.i], f.i, a.window) : 0;
  const int64_t r_last = min(r0 + kRows, a.n) - 1;
  f.i_last = a.q_offset + r_last;
  const int64_t i_first = a.q_offset + r0;
  // first_key is non-decreasing in i: the block's first row has the smallest.
  f.k_begin = first_key(a.seg[i_first], i_first, a.window) / kTile * kTile;
  return f;
}

// Loads keys [k0, k0 + 32) of kv head g into Kt and Vt (zeros past `k_last` and below
// a.k_offset).
__device__ void load_kv_tile(float* Kt, float* Vt, const AttnArgs& a, int g, int64_t k0,
                             int64_t k_last) {
  const int h = a.h, ld = h + 1;
  const int64_t ldkv = int64_t{a.G} * h;
  for (int e = threadIdx.x; e < kTile * h; e += blockDim.x) {
    const int jj = e / h, d = e % h;
    const int64_t j = k0 + jj;
    const bool in = j >= a.k_offset && j <= k_last;
    const int64_t jr = j - a.k_offset;  // k's row
    Kt[jj * ld + d] = in ? a.k.ld(jr * ldkv + g * h + d) : 0.0f;
    Vt[jj * ld + d] = in ? a.v.ld(jr * ldkv + g * h + d) : 0.0f;
  }
}

__device__ __forceinline__ float dot_row(const float* x, const float* y, int h) {
  float s = 0.0f;
  for (int d = 0; d < h; ++d) s += x[d] * y[d];
  return s;
}

__global__ void attn_forward_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  SBP_DYNAMIC_SHARED(float, sm);
  const int h = a.h, ld = h + 1;
  float* Kt = sm;
  float* Vt = Kt + kTile * ld;
  float* Qs = Vt + kTile * ld;     // (kRows, h) scaled q rows
  float* Ps = Qs + 2 * kRows * h;  // (kRows, 32)
  const RowFrame f = row_frame(a);
  const int64_t ldq = int64_t{a.H} * h;
  float* qs = Qs + f.warp * h;
  float* ps = Ps + f.warp * kTile;
  if (f.valid)
    for (int d = f.lane; d < h; d += 32) qs[d] = a.scale * a.q.ld(f.r * ldq + f.hq * h + d);
  float acc[kPerLane];
  SBP_UNROLL
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t k0 = f.k_begin; k0 <= f.i_last; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_kv_tile(Kt, Vt, a, f.g, k0, f.i_last);
    __syncthreads();
    if (!f.valid || k0 > f.i || k0 + kTile - 1 < f.lo) continue;  // no visible key in the tile
    const int64_t j = k0 + f.lane;
    const float s = (j >= f.lo && j <= f.i) ? dot_row(qs, Kt + f.lane * ld, h) : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    const float corr = rescale(m, m_new);
    l = l * corr + warp_sum(p);
    ps[f.lane] = p;
    __syncwarp();
    SBP_UNROLL
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
  SBP_UNROLL
  for (int t = 0; t < kPerLane; ++t) {
    const int d = f.lane + 32 * t;
    if (d < h) a.out.st(f.r * ldq + f.hq * h + d, acc[t] / l);
  }
  if (f.lane == 0) a.lse[f.r * a.H + f.hq] = m + logf(l);
}

// D = rowsum(dout * out), out F32 (the forward's unrounded output).
__global__ void attn_delta_dot_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * int64_t{kRows} + warp;
  if (r >= a.n) return;
  const int hq = blockIdx.y, h = a.h;
  const int64_t base = r * a.H * int64_t{h} + hq * int64_t{h};
  float s = 0.0f;
  for (int d = lane; d < h; d += 32) s += a.dout.ld(base + d) * a.out.ld(base + d);
  s = warp_sum(s);
  if (lane == 0) a.D[r * a.H + hq] = s;
}

// D = sum_j P_ij dP_ij from the probabilities (out BF16: rowsum(dout * out) would carry out's
// rounding, backend.h). Shaped like the forward; each lane sums its keys in tile order.
// kDq: the dQ kernel instead, which needs D (computed before) and the same per-pair values.
template <bool kDq>
__global__ void attn_rows_backward_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  SBP_DYNAMIC_SHARED(float, sm);
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
  SBP_UNROLL
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
      ps[f.lane] = attn_ds(p, dp, Di);
      __syncwarp();
      SBP_UNROLL
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
    dsum = warp_sum(dsum);
    if (f.lane == 0) a.D[f.r * a.H + f.hq] = dsum;
  } else {
    SBP_UNROLL
    for (int t = 0; t < kPerLane; ++t) {
      const int d = f.lane + 32 * t;
      if (d < h) a.dq.add(f.r * ldq + f.hq * h + d, a.scale * acc[t]);
    }
  }
}

// dK, dV of keys [32 b, 32 b + 32) of kv head g: one warp, lane jj owns key 32 b + jj.
__global__ void attn_dkdv_kernel(AttnArgs a) {
  SBP_ATTN_RETURN_IF_CHECK_FAILED(a);
  SBP_DYNAMIC_SHARED(float, sm);
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
  if (first_key(a.seg[i_begin], i_begin, a.window) > k_last) return;
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
      const int64_t lo = first_key(a.seg[i], i, a.window);
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
      const float ds = attn_ds(p, dot_row(dos, vj, h), a.D[r * a.H + hq]);
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
    if (jr < a.k_offset) continue;  // seen by no query, and not in dk
    a.dk.add((jr - a.k_offset) * ldkv + g * h + d, dKa[jj * ld + d]);
    a.dv.add((jr - a.k_offset) * ldkv + g * h + d, dVa[jj * ld + d]);
  }
}

}  // namespace

bool simt_attention_supported(int h) { return h > 0 && h <= kMaxHeadDim; }

void simt_attention_run(const AttnArgs& a, AttnPhase phase, cudaStream_t stream) {
  const dim3 rows(static_cast<unsigned>((a.n + kRows - 1) / kRows), static_cast<unsigned>(a.H));
  switch (phase) {
    case AttnPhase::forward:
      launch_attention(attn_forward_kernel, rows, 32 * kRows, row_kernel_smem(a.h), stream, a);
      return;
    case AttnPhase::delta:
      launch_attention(attn_rows_backward_kernel<false>, rows, 32 * kRows, row_kernel_smem(a.h),
                       stream, a);
      return;
    case AttnPhase::dq:
      launch_attention(attn_rows_backward_kernel<true>, rows, 32 * kRows, row_kernel_smem(a.h),
                       stream, a);
      return;
    case AttnPhase::dkdv: {
      const int64_t key_tiles = (a.q_offset + a.n + kTile - 1) / kTile;
      const dim3 kv(static_cast<unsigned>(key_tiles), static_cast<unsigned>(a.G));
      launch_attention(attn_dkdv_kernel, kv, 32, kv_kernel_smem(a.h), stream, a);
      return;
    }
  }
}

void simt_attention_forward(const AttnArgs& a, cudaStream_t stream) {
  simt_attention_run(a, AttnPhase::forward, stream);
}

void attention_delta_from_out(const AttnArgs& a, cudaStream_t stream) {
  const dim3 rows(static_cast<unsigned>((a.n + kRows - 1) / kRows), static_cast<unsigned>(a.H));
  launch_attention(attn_delta_dot_kernel, rows, 32 * kRows, 0, stream, a);
}

void simt_attention_backward(const AttnArgs& a, bool d_from_p, cudaStream_t stream) {
  if (d_from_p) simt_attention_run(a, AttnPhase::delta, stream);
  simt_attention_run(a, AttnPhase::dq, stream);
  simt_attention_run(a, AttnPhase::dkdv, stream);
}

}  // namespace sbp::cuda
