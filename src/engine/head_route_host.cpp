// The generic route (head_route.h HostChunks): the host sees every block.
#include "engine/chunk_loops.h"
#include "engine/head_routes.h"

namespace sbp {

void run_head_route(const HeadPass& pass, const HostChunks& route) {
  const ContextSlice& cs = pass.cs;
  const int64_t T = pass.step.size();
  const bool computes = pass.be.computes();
  const bool lm = pass.objective.head() == HeadKind::lm;
  const int passes = route.prepasses;
  // Pre-passes (no grad): every block once per pass, from the kept final hidden state; with a
  // context group, each rank its own blocks, then the group sums what they added up. The blocks
  // leave their numbers on the device; the host reads the pass once and shows them to the
  // objective block by block, in row order. With a single block the gradient pass below reuses
  // it instead of recomputing it.
  const bool one_block = !cs.split() && pass.hc >= T;
  for (int p = 0; p < passes && !one_block; ++p) {
    HeadPassRows rows(pass.be, pass.pool, pass.objective.head(), route.entropy, cs.local_rows());
    for_piece_chunks(cs, pass.hc, pass.be, [&](const RowPiece& piece, int64_t s, int64_t e) {
      rows.keep(pass.block(piece, s, e, route.entropy, /*to_host=*/false), piece.local + s);
    });
    const HeadPassRows::Host host = rows.read(/*at_next_wait=*/false);  // the pass's one wait
    if (!computes) continue;
    for_piece_chunks(cs, pass.hc, pass.be, [&](const RowPiece& piece, int64_t s, int64_t e) {
      route.prepass(p, host.chunk(piece.local + s, e - s, piece.begin + s));
    });
    sum_over_group(pass.group, pass.objective.prepass_sums(p));
    route.finish_prepass(p);
  }
  // Gradients from constants alone (after the pre-passes, which had the loss) need none of
  // this pass's values: the blocks keep them on the device and nothing waits.
  const bool constant = route.constant && passes > 0 && lm && !route.entropy;
  for_piece_chunks(cs, pass.hc, pass.be, [&](const RowPiece& piece, int64_t s, int64_t e) {
    HeadBlock b = pass.block(piece, s, e, route.entropy,
                             /*to_host=*/!constant || (one_block && passes > 0));
    for (int p = 0; p < passes && one_block; ++p) {
      if (computes) route.prepass(p, b.chunk());
      if (computes) route.finish_prepass(p);
    }
    const TokenChunkGrads g = b.alloc_grads();
    if (computes && constant)
      route.constant(piece.begin + s, g.dlogp);
    else if (computes)
      route.grads(b.chunk(), g);
    pass.backward(b, piece, s, e);
  });
  if (computes) sum_over_group(pass.group, pass.objective.pass_sums());
}

}  // namespace sbp
