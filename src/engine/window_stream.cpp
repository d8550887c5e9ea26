#include "engine/window_stream.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

namespace sbp {

namespace {

// The chunks of [0, T) in `chunk`-row pieces, and which of them a backend that skips repeated
// chunks (the planner's) runs: the rule of engine.cpp's ChunkRange (first two, last two, and
// the shorter last chunk), so that the planner's ledger sees what a real run's does.
struct Chunks {
  int64_t T, chunk, count, full;
  bool skip;
  Chunks(int64_t t, int64_t c, const Backend& be)
      : T(t), chunk(c), count((t + c - 1) / c), full(t / c), skip(be.skips_repeated_chunks()) {}
  bool runs(int64_t c) const { return !skip || c < 2 || c >= full - 2; }
};

// Copies rows [src, src + len) of each tensor to rows [dst, dst + len) of the same tensor, in
// pieces of at most |src - dst| rows (a piece's source and destination never overlap), ordered
// so that no piece reads a row an earlier piece wrote: front to back when moving down, back to
// front when moving up.
void move_rows(Backend& be, std::initializer_list<Tensor> ts, int64_t src, int64_t dst,
               int64_t len) {
  const int64_t step = std::abs(src - dst);
  if (len <= 0 || step == 0) return;
  for (int64_t done = 0; done < len; done += step) {
    const int64_t m = std::min(step, len - done);
    const int64_t o = dst < src ? done : len - done - m;  // offset of this piece
    for (const Tensor& t : ts)
      be.copy(t.slice_rows(dst + o, dst + o + m), t.slice_rows(src + o, src + o + m));
  }
}

}  // namespace

int64_t window_frame_rows(int64_t window, int64_t chunk) {
  const int64_t history = (window - 1 + chunk - 1) / chunk;  // ceil((w - 1) / c) whole chunks
  return (history + 1) * chunk;
}

bool window_stream_applies(const ModelConfig& cfg, int64_t layer, int64_t T, int64_t chunk) {
  const int64_t w = cfg.layer_window(layer);
  return w > 0 && window_frame_rows(w, chunk) < T;
}

void window_layer_forward(DecoderLayerOps& ops, Backend& be, const LayerTensors& w, const Tensor& x,
                          const Tensor& y, int64_t window, int64_t chunk) {
  const int64_t T = x.rows(), c = chunk, rows = window_frame_rows(window, chunk);
  const int64_t history = rows - c;  // rows of the frame below its chunk, a multiple of c
  const Category ws = Category::layer_workspace;
  LayerKV buf = ops.alloc_kv(rows, ws, /*keep_k_raw=*/false);  // (rows, G*h) K, V
  KVRows frame(buf);
  const Chunks r(T, c, be);
  for (int64_t ci = 0; ci < r.count; ++ci) {
    if (!r.runs(ci)) ci = r.full - 2;  // jump over the repeats
    const int64_t s = ci * c, e = std::min(T, s + c);
    const int64_t f = s - history;                        // global row of buffer row 0
    const int64_t lo = std::max<int64_t>(0, s - window + 1);  // first key any row of the chunk sees
    frame.k0 = f;
    // Rows [lo, s) stay: they were at buffer rows (g - f + c) in the previous chunk's frame.
    if (s > 0) move_rows(be, {frame.k, frame.v}, lo - f + c, lo - f, s - lo);
    ops.kv_forward(w, x.slice_rows(s, e), s, frame);
    ops.rows_forward(w, x.slice_rows(s, e), s, frame.rows(lo - f, e - f), y.slice_rows(s, e),
                     nullptr, ws);
  }
}

void window_layer_backward(DecoderLayerOps& ops, Backend& be, Pool& pool, const LayerTensors& w,
                           const LayerTensors& gw, const Tensor& x, const Tensor& gy,
                           int64_t window, int64_t chunk) {
  const int64_t T = x.rows(), c = chunk, rows = window_frame_rows(window, chunk);
  const int64_t history = rows - c;
  const Category ws = Category::layer_workspace;
  LayerKV buf = ops.alloc_kv(rows, ws, /*keep_k_raw=*/false);  // (rows, G*h) K, V
  KVRows frame(buf);
  const int64_t Gh = frame.k.cols();
  // (rows, G*h) F32 accumulators; each row is zeroed when its key enters the frame.
  Buffer dK = pool.allocate(ws, DType::F32, {rows, Gh});
  Buffer dV = pool.allocate(ws, DType::F32, {rows, Gh});
  const Chunks r(T, c, be);
  for (int64_t ci = r.count - 1; ci >= 0; --ci) {
    if (!r.runs(ci)) ci = 1;  // jump over the repeats
    const int64_t s = ci * c, e = std::min(T, s + c);
    const int64_t f = s - history;                        // global row of buffer row 0
    const int64_t f0 = std::max<int64_t>(0, f);           // first row of the frame that exists
    const int64_t lo = std::max<int64_t>(0, s - window + 1);  // first key any row of the chunk sees
    frame.k0 = f;
    // Rows [kept, e) stay from the chunk after this one (keys, and their partial gradients from
    // its queries): they were at buffer rows (g - f - c) in its frame.
    int64_t kept = e;
    if (e < T) {
      kept = std::max<int64_t>(0, f + c);
      move_rows(be, {frame.k, frame.v, dK.view(), dV.view()}, kept - f - c, kept - f, e - kept);
    }
    // Rows [f0, kept) enter, in the whole-sequence loop's chunks [a, a + c) (a a multiple of c:
    // one chunk, or for the last chunk, first here, the whole frame): K/V recomputed from the
    // checkpoint by the same products, so the same bits on any BLAS; gradients from zero.
    for (int64_t a = f0; a < kept; a += c) {
      const int64_t b = std::min(kept, a + c);
      ops.kv_forward(w, x.slice_rows(a, b), a, frame);
    }
    if (kept > f0) {
      be.fill(dK.rows(f0 - f, kept - f), 0.0f);
      be.fill(dV.rows(f0 - f, kept - f), 0.0f);
    }
    const KVRows win = frame.rows(lo - f, e - f);  // keys [lo, e)
    ChunkActs acts;
    ops.rows_forward(w, x.slice_rows(s, e), s, win, Tensor(), &acts, ws);
    ops.rows_backward(w, gw, x.slice_rows(s, e), s, acts, win, dK.rows(lo - f, e - f),
                      dV.rows(lo - f, e - f), gy.slice_rows(s, e));
  }
}

}  // namespace sbp
