// SFT's route (head_route.h ConstantGrads): dL/dlogp from constants, the loss from the pass's
// log-probs, gathered on the device and read once (docs/CUDA.md "no host wait in the head").
#include "engine/chunk_loops.h"
#include "engine/head_routes.h"

namespace sbp {

void run_head_route(const HeadPass& pass, const ConstantGrads& route) {
  const bool computes = pass.be.computes();
  HeadPassRows rows(pass.be, pass.pool, HeadKind::lm, /*entropy=*/false, pass.cs.local_rows());
  for_piece_chunks(pass.cs, pass.hc, pass.be, [&](const RowPiece& piece, int64_t s, int64_t e) {
    HeadBlock b = pass.block(piece, s, e, /*entropy=*/false, /*to_host=*/false);
    const TokenChunkGrads g = b.alloc_grads();
    if (computes) route.grads(piece.begin + s, g.dlogp);
    rows.keep(b, piece.local + s);
    pass.backward(b, piece, s, e);
  });
  pass.complete(rows, [add_logp = route.add_logp](const TokenChunk& piece) {
    add_logp(piece.row_begin, piece.logp);
  });
}

}  // namespace sbp
