#include "optim/shard_range.h"

#include <algorithm>

#include "core/error.h"

namespace sbp {

ShardRange shard_range(int64_t numel, int ranks, int rank) {
  SBP_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && numel >= 0,
            "shard_range of " + std::to_string(numel) + " over rank " + std::to_string(rank) +
                " of " + std::to_string(ranks));
  const int64_t base = numel / ranks, extra = numel % ranks;
  ShardRange r;
  r.offset = rank * base + std::min<int64_t>(rank, extra);
  r.count = base + (rank < extra ? 1 : 0);
  return r;
}

std::vector<int64_t> shard_counts(int64_t numel, int ranks) {
  std::vector<int64_t> counts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    counts[static_cast<size_t>(r)] = shard_range(numel, ranks, r).count;
  return counts;
}

}  // namespace sbp
