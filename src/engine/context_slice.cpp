#include "engine/context_slice.h"

#include <algorithm>

#include "core/error.h"

namespace sbp {

ContextSlice::ContextSlice(int64_t T, int ranks, int rank) : T_(T), ranks_(ranks), rank_(rank) {
  SBP_CHECK(T >= 0 && ranks >= 1 && rank >= 0 && rank < ranks, "ContextSlice: bad T, ranks or rank");
  if (ranks == 1) {
    pieces_.push_back({0, T, 0, 0});
  } else {
    const int64_t P = 2 * static_cast<int64_t>(ranks);
    for (int64_t p = 0; p < P; ++p) {
      // Piece p of 2C: rows [p T / 2C, (p + 1) T / 2C), owned by min(p, 2C - 1 - p).
      const int owner = static_cast<int>(std::min(p, P - 1 - p));
      pieces_.push_back({p * T / P, (p + 1) * T / P, 0, owner});
    }
    // Local offsets: each owner's pieces one after the other, in row order.
    std::vector<int64_t> filled(static_cast<size_t>(ranks), 0);
    for (RowPiece& piece : pieces_) {
      piece.local = filled[static_cast<size_t>(piece.owner)];
      filled[static_cast<size_t>(piece.owner)] += piece.size();
    }
  }
  for (const RowPiece& piece : pieces_)
    if (piece.owner == rank) mine_.push_back(piece);
}

int64_t ContextSlice::local_rows(int r) const {
  int64_t n = 0;
  for (const RowPiece& piece : pieces_)
    if (piece.owner == r) n += piece.size();
  return n;
}

std::vector<int64_t> attention_work(const ContextSlice& slice, std::span<const int32_t> seg_start,
                                    int64_t window) {
  SBP_CHECK(static_cast<int64_t>(seg_start.size()) == slice.T(),
            "attention_work: one segment start per row");
  std::vector<int64_t> work(static_cast<size_t>(slice.ranks()), 0);
  for (const RowPiece& piece : slice.pieces())
    for (int64_t t = piece.begin; t < piece.end; ++t) {
      int64_t keys = t - seg_start[static_cast<size_t>(t)] + 1;
      if (window > 0) keys = std::min(keys, window);
      work[static_cast<size_t>(piece.owner)] += keys;
    }
  return work;
}

}  // namespace sbp
