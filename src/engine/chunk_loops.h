#pragma once
// The loops over row chunks that the engine's passes share (layers, head routes), and the
// context group's sum of an objective's accumulators.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/communicator.h"
#include "engine/context_slice.h"

namespace sbp {

// The chunks a loop over [0, T) in `chunk`-row pieces runs. A backend that computes runs every
// chunk. One that skips repeated chunks (the planner's) runs, of the full-sized chunks, the first
// two and the last two, and the shorter last chunk: every buffer a chunk allocates is sized by its
// row count alone (n rows of something), and each chunk frees what it allocated before the next
// begins, so a skipped chunk would repeat the allocations of the one before it from the same
// ledger state. The peak and its breakdown are unchanged (the plan-equals-measurement tests
// compare them with real runs, which run every chunk) and planning 10^8 tokens costs what
// planning 10^4 does. The second and second-to-last runs keep that true even if a first
// chunk ever allocated something lazily that later chunks reuse.
struct ChunkRange {
  int64_t T, chunk, count, full;  // full: chunks of exactly `chunk` rows, indices [0, full)
  bool skip;
  ChunkRange(int64_t t, int64_t c, const Backend& be)
      : T(t), chunk(c), count((t + c - 1) / c), full(t / c), skip(be.skips_repeated_chunks()) {}
  bool runs(int64_t c) const { return !skip || c < 2 || c >= full - 2; }
};

// Calls fn(begin, end) for consecutive chunks of `chunk` rows covering [0, T).
template <class Fn>
inline void for_chunks(const ChunkRange& r, Fn fn) {
  for (int64_t c = 0; c < r.count; ++c) {
    if (!r.runs(c)) c = r.full - 2;  // jump over the repeats
    fn(c * r.chunk, std::min(r.T, (c + 1) * r.chunk));
  }
}

// Same, last chunk first (the order StreamBP's backward needs).
template <class Fn>
inline void for_chunks_reversed(const ChunkRange& r, Fn fn) {
  for (int64_t c = r.count - 1; c >= 0; --c) {
    if (!r.runs(c)) c = 1;
    fn(c * r.chunk, std::min(r.T, (c + 1) * r.chunk));
  }
}

// Calls fn(piece, begin, end) for the chunks of `chunk` rows of each of this rank's pieces, in
// row order; begin and end are rows of the piece (global rows piece.begin + begin ..., local
// rows piece.local + begin ...).
template <class Fn>
inline void for_piece_chunks(const ContextSlice& cs, int64_t chunk, const Backend& be, Fn fn) {
  for (const RowPiece& p : cs.mine())
    for_chunks(ChunkRange(p.size(), chunk, be), [&](int64_t s, int64_t e) { fn(p, s, e); });
}

// Sums the objective's row-additive accumulators over the context group (Objective::pass_sums).
inline void sum_over_group(Communicator* group, std::vector<std::span<double>> parts) {
  if (!group || parts.empty()) return;
  std::vector<double> all;
  for (const std::span<double>& part : parts) all.insert(all.end(), part.begin(), part.end());
  group->sum(std::span<double>(all));
  size_t at = 0;
  for (const std::span<double>& part : parts)
    for (double& v : part) v = all[at++];
}

}  // namespace sbp
