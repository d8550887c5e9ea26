#pragma once
// A sliding-window layer in stream mode holds the K/V of its window plus one chunk, not of all
// T rows (issue 28 item 4; the design in docs/MODELS.md, "Sliding windows in stream mode").
//
// Row i of a layer with window w sees keys [max(seg_start[i], i - w + 1), i]. A chunk of query
// rows [s, e) therefore needs the keys and values of rows [lo, e), lo = max(0, s - w + 1).
// And the keys of rows [s, e) get gradient only from queries in [s, e + w - 1), which the
// backward (last chunk first) has processed once it reaches chunk [s, e). So both passes run on
// one frame per tensor that holds the chunk and the whole chunks before it that reach into its
// window: r = (ceil((w - 1) / c) + 1) c rows (window_frame_rows), at most c - 1 more than the
// c + w - 1 rows the window needs. Whole chunks because the frame's K/V rows are computed by the
// very products of the whole-sequence loop (engine.cpp: x_c Wk^T on rows [s, s + c), s a
// multiple of c): a BLAS may round a row differently inside a product of another row count,
// and these rows must be the whole loop's to the bit on any BLAS (docs/HACKING.md, "The
// exactness contract").
//
//   frame of chunk ci (rows [s, e), s = ci c): buffer row p holds global row f + p,
//   f = s - (r - c); rows of the frame below 0 are never used.
//   forward (first to last): the frame moves up by c: rows [lo, s) of the previous chunk stay
//     (copied down by c rows), the chunk's own K/V rows [s, e) enter (computed from x as
//     before), then the chunk's forward against K/V rows [lo, e).
//   backward (last to first): the frame moves down by c: K/V and dK/dV rows [max(0, f + c), e)
//     stay (copied up by c rows), the chunk [max(0, f), f + c) enters (for the last chunk, the
//     first here: every chunk of its frame), recomputed from the layer's input checkpoint (each
//     chunk once per backward, as the whole-T K/V phase computed it), their dK/dV rows start at
//     zero; then the chunk's recompute and backward (decoder_layer.h), which consumes dK/dV rows
//     [s, e): final, since every query that sees them is done.
//
// The attention calls get the window's rows with a key offset (AttentionDims::k_offset = lo),
// and the CPU kernel's key tiles stay at global multiples of its tile size, so every result is
// bit for bit that of the whole-T buffers (tests/engine/window_stream_test.cpp). Copies move at
// most r - c rows per tensor and chunk (in pieces of at most c rows, so source and destination
// of one copy never overlap).
//
// The planner runs the same code on the shape-only backend, which skips repeated chunks as the
// engine's loops do (engine.cpp, ChunkRange): every allocation here depends only on the chunk's
// (s, e), not on what an earlier chunk left, so a skipped chunk changes no peak.
#include <cstdint>

#include "backend/backend.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/parameters.h"

namespace sbp {

// Rows of the frame of a sliding layer with window `window` (> 0) in chunks of `chunk`: the
// chunk and the ceil((window - 1) / chunk) whole chunks before it.
int64_t window_frame_rows(int64_t window, int64_t chunk);

// Whether layer `layer` streams through a window frame for T rows in chunks of `chunk`: a
// sliding layer whose frame is shorter than T (else the frame would be the whole sequence, and
// the whole-T path is the same thing with fewer copies).
bool window_stream_applies(const ModelConfig& cfg, int64_t layer, int64_t T, int64_t chunk);

// Forward of one sliding layer in stream mode: y (T, d) from the layer input x (T, d), in chunks
// of `chunk` rows, first to last. `window` is the layer's (ModelConfig::layer_window).
void window_layer_forward(DecoderLayerOps& ops, Backend& be, const LayerTensors& w, const Tensor& x,
                          const Tensor& y, int64_t window, int64_t chunk);

// Backward of one sliding layer in stream mode, chunks last to first: gy (T, d) F32 in dL/dy,
// out dL/dx (in place); weight gradients accumulate (+=) into gw.
void window_layer_backward(DecoderLayerOps& ops, Backend& be, Pool& pool, const LayerTensors& w,
                           const LayerTensors& gw, const Tensor& x, const Tensor& gy,
                           int64_t window, int64_t chunk);

}  // namespace sbp
