#pragma once
// The row movements of a context-parallel step (engine/context_slice.h), on the ranks of one
// context group. Every rank of the group calls each function in the same order, with tensors
// of the same shapes. Collectives run on the tensors' own memory where the communicator can
// address it (the CPU backend's; a GPU's with NCCL), else through a host copy (the checking
// backend's protected memory; a GPU's under MPI).
#include <algorithm>
#include <span>
#include <vector>

#include "core/communicator.h"
#include "core/tensor.h"
#include "engine/context_slice.h"

namespace sbp {

// Row collectives issued now and completed by wait() (or the destructor), so that compute runs
// while they are in flight. Every rank issues the same calls in the same order; between issue
// and wait nothing may touch the rows a call moves (other rows may be computed on).
class RowCollectives {
 public:
  explicit RowCollectives(Communicator& group) : group_(group) {}
  RowCollectives(const RowCollectives&) = delete;
  RowCollectives& operator=(const RowCollectives&) = delete;
  ~RowCollectives();
  // gather_rows / reduce_rows_to_owners below, for the pieces [p0, p1) of slice.pieces() only.
  void gather(const ContextSlice& slice, std::span<const Tensor> ts, size_t p0, size_t p1);
  void reduce_to_owners(const ContextSlice& slice, std::span<const Tensor> ts, size_t p0,
                        size_t p1);
  void wait();

 private:
  struct Staged {
    Tensor rows;
    std::vector<char> bytes;
    bool upload = false;  // written back when the collective completes
  };
  Communicator& group_;
  std::vector<Request> requests_;
  std::vector<Staged> staged_;
};

// Each t (T, cols) in global rows, any dtype: every piece's rows, as its owner computed them,
// copied to every rank (K/V: each rank computed its own rows; afterwards all hold all T).
void gather_rows(Communicator& group, const ContextSlice& slice, std::span<const Tensor> ts);

// Each t (T, cols) F32 in global rows: every piece's rows summed over the group onto its owner
// (dK/dV: every rank's queries added into every key row; afterwards each owner holds the whole
// gradient of its rows). Other ranks' rows are unspecified afterwards.
void reduce_rows_to_owners(Communicator& group, const ContextSlice& slice,
                           std::span<const Tensor> ts);

// local (Tl) host values of this rank's rows, each piece of the slice copied to its global rows
// of out (T); the other rows of out are left as they are (gather_host_rows below fills them).
template <typename V>
void place_local_rows(const ContextSlice& slice, std::span<const V> local, std::span<V> out) {
  for (const RowPiece& p : slice.mine())
    std::copy_n(local.begin() + p.local, p.size(), out.begin() + p.begin);
}

// v (T) host values of which this rank filled its own rows: afterwards every row holds its
// owner's value on every rank.
void gather_host_rows(Communicator& group, const ContextSlice& slice, std::span<float> v);
void gather_host_rows(Communicator& group, const ContextSlice& slice, std::span<int32_t> v);

}  // namespace sbp
