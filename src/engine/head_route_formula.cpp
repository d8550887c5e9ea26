// The per-token formula routes (head_route.h PolicyFormula, ValueFormula): the backend writes
// each block's gradients from the block's log-probs (values) and per-row constants, and the
// objective sees the pass's values once, after the pass, for its loss and statistics.
#include <vector>

#include "core/error.h"
#include "engine/chunk_loops.h"
#include "engine/head_routes.h"

namespace sbp {

namespace {

// Rows [s, e) of piece p of a formula's (n, width) constants: a view where the backend holds
// the whole batch's (on_device), else the host's, written into `host`.
HeadBlock::Rows block_rows(const HeadPass& pass, const Tensor& on_device, const RowsFn& rows,
                           int width, const RowPiece& piece, int64_t s, int64_t e,
                           std::vector<float>& host) {
  HeadBlock::Rows out;
  if (on_device.defined()) {
    out.device = on_device.slice_rows(piece.begin + s, piece.begin + e);
    return out;
  }
  const bool computes = pass.be.computes();
  host.assign(computes ? static_cast<size_t>((e - s) * width) : 0, 0.0f);
  if (computes) rows(piece.begin + s, host);
  out.host = host;
  return out;
}

void check_on_device(const HeadPass& pass, const Tensor& on_device) {
  SBP_CHECK(!on_device.defined() || (!pass.cs.split() && on_device.rows() == pass.step.size()),
            "objective: its rows on the device must cover the batch, without a context group");
}

}  // namespace

void run_head_route(const HeadPass& pass, const PolicyFormula& route) {
  check_on_device(pass, route.rows_on_device);
  const ReferenceLogp* ref = route.reference;
  HeadPassRows kept(pass.be, pass.pool, HeadKind::lm, route.entropy, pass.cs.local_rows());
  std::vector<float> constants;  // (n, 4) a block's host constants
  for_piece_chunks(pass.cs, pass.hc, pass.be, [&](const RowPiece& piece, int64_t s, int64_t e) {
    HeadBlock b = pass.block(piece, s, e, route.entropy, /*to_host=*/false);
    b.policy_grads(
        route.terms,
        block_rows(pass, route.rows_on_device, route.rows, kPolicyRowWidth, piece, s, e, constants),
        ref && ref->device.defined() ? ref->device.slice_rows(piece.begin + s, piece.begin + e)
                                     : Tensor());
    kept.keep(b, piece.local + s);
    pass.backward(b, piece, s, e);
  });
  pass.complete(kept, route.add_values);
}

void run_head_route(const HeadPass& pass, const ValueFormula& route) {
  check_on_device(pass, route.rows_on_device);
  HeadPassRows kept(pass.be, pass.pool, HeadKind::value, false, pass.cs.local_rows());
  std::vector<float> constants;  // (n, 3) a block's host constants
  for_piece_chunks(pass.cs, pass.hc, pass.be, [&](const RowPiece& piece, int64_t s, int64_t e) {
    HeadBlock b = pass.block(piece, s, e, /*entropy=*/false, /*to_host=*/false);
    b.value_grads(route.terms, block_rows(pass, route.rows_on_device, route.rows, kValueRowWidth,
                                          piece, s, e, constants));
    kept.keep(b, piece.local + s);
    pass.backward(b, piece, s, e);
  });
  pass.complete(kept, route.add_values);
}

}  // namespace sbp
