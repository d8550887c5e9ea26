#pragma once
// The row movements of a context-parallel step (engine/context_slice.h), on the ranks of one
// context group. Every rank of the group calls each function in the same order, with tensors
// of the same shapes. Collectives run on the tensors' own memory where the communicator can
// address it (the CPU backend's; a GPU's with NCCL), else through a host copy (the checking
// backend's protected memory; a GPU's under MPI).
#include <span>

#include "core/communicator.h"
#include "core/tensor.h"
#include "engine/context_slice.h"

namespace sbp {

// Each t (T, cols) in global rows, any dtype: every piece's rows, as its owner computed them,
// copied to every rank (K/V: each rank computed its own rows; afterwards all hold all T).
void gather_rows(Communicator& group, const ContextSlice& slice, std::span<const Tensor> ts);

// Each t (T, cols) F32 in global rows: every piece's rows summed over the group onto its owner
// (dK/dV: every rank's queries added into every key row; afterwards each owner holds the whole
// gradient of its rows). Other ranks' rows are unspecified afterwards.
void reduce_rows_to_owners(Communicator& group, const ContextSlice& slice,
                           std::span<const Tensor> ts);

// v (T) host values of which this rank filled its own rows: afterwards every row holds its
// owner's value on every rank.
void gather_host_rows(Communicator& group, const ContextSlice& slice, std::span<float> v);
void gather_host_rows(Communicator& group, const ContextSlice& slice, std::span<int32_t> v);

}  // namespace sbp
