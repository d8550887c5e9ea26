#pragma once
// How ZeRO sharding (docs/DISTRIBUTED.md) splits one parameter tensor over R ranks: the tensor's
// flattened elements are cut into R contiguous slices in rank order, the first numel % R ranks
// holding one element more. Every rank owns a slice of every tensor, so optimizer state,
// gradient shards and the work of the update are balanced to within one element per tensor,
// and each tensor is reduced (reduce-scatter) and gathered (all-gather) by one collective.
#include <cstdint>
#include <vector>

namespace sbp {

struct ShardRange {
  int64_t offset = 0;  // first flattened element
  int64_t count = 0;   // elements (0 when the tensor has fewer elements than ranks)
  int64_t end() const { return offset + count; }
};

// Rank `rank`'s slice of a tensor of `numel` elements split over `ranks` ranks.
ShardRange shard_range(int64_t numel, int ranks, int rank);
// Every rank's count, in rank order (what reduce-scatter and all-gather take).
std::vector<int64_t> shard_counts(int64_t numel, int ranks);

}  // namespace sbp
