#include "engine/context_slice.h"

#include <algorithm>

#include "core/error.h"

namespace sbp {

ContextSlice::ContextSlice(int64_t T, int ranks, int rank) : T_(T), ranks_(ranks), rank_(rank) {
  SBP_CHECK(T >= 0 && ranks >= 1 && rank >= 0 && rank < ranks,
            "ContextSlice: bad T, ranks or rank");
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

int busiest_rank(int64_t T, int ranks) {
  const ContextSlice cs(T, ranks, 0);
  int best = 0;
  for (int r = 1; r < ranks; ++r)
    if (cs.local_rows(r) > cs.local_rows(best)) best = r;
  return best;
}

namespace {

// Sum over positions u in [u0, u1) of min(u + 1, window) (window <= 0: no window).
int64_t keys_sum(int64_t u0, int64_t u1, int64_t window) {
  if (u1 <= u0) return 0;
  auto ramp = [](int64_t a, int64_t b) { return (a + 1 + b) * (b - a) / 2; };  // sum of u + 1
  if (window <= 0 || u1 <= window) return ramp(u0, u1);
  if (u0 >= window) return window * (u1 - u0);
  return ramp(u0, window) + window * (u1 - window);
}

}  // namespace

std::vector<int64_t> attention_work(const ContextSlice& slice, std::span<const int64_t> seq_lens,
                                    int64_t window) {
  std::vector<int64_t> work(static_cast<size_t>(slice.ranks()), 0);
  int64_t start = 0;
  for (int64_t len : seq_lens) {
    const int64_t end = start + len;
    for (const RowPiece& piece : slice.pieces()) {
      const int64_t a = std::max(start, piece.begin), b = std::min(end, piece.end);
      work[static_cast<size_t>(piece.owner)] += keys_sum(a - start, b - start, window);
    }
    start = end;
  }
  SBP_CHECK(start == slice.T(), "attention_work: the segments' lengths do not sum to T");
  return work;
}

}  // namespace sbp
