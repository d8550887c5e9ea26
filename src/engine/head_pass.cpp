#include <memory>
#include <vector>

#include "engine/chunk_loops.h"
#include "engine/head_routes.h"

namespace sbp {

HeadBlock HeadPass::block(const RowPiece& p, int64_t s, int64_t e, bool entropy,
                          bool to_host) const {
  return HeadBlock(cfg, be, pool, W, act, objective.head(), entropy,
                   hidden.slice_rows(p.local + s, p.local + e),
                   step.targets().slice_rows(p.begin + s, p.begin + e), p.begin + s, to_host);
}

void HeadPass::backward(HeadBlock& b, const RowPiece& p, int64_t s, int64_t e) const {
  b.backward(G, gy.open(p.local + s, p.local + e));
  gy.close();
}

void HeadPass::complete(HeadPassRows& rows, std::function<void(const TokenChunk&)> show) const {
  // The pieces' rows in row order, which adds the loss in the blocks' order (the completions
  // walk their rows one after another, whatever the blocks were), then the group's sums, which
  // need every rank's pass.
  const HeadPassRows::Host host = rows.read(/*at_next_wait=*/later != nullptr);
  if (!be.computes()) return;
  auto read = [host, show = std::move(show), &objective = objective, group = group,
               pieces = std::vector<RowPiece>(cs.mine().begin(), cs.mine().end())] {
    for (const RowPiece& piece : pieces) show(host.chunk(piece.local, piece.size(), piece.begin));
    sum_over_group(group, objective.pass_sums());
  };
  if (later)
    later->add(read);
  else
    read();
}

}  // namespace sbp
