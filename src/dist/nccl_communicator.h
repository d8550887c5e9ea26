#pragma once
// Data parallel across GPUs: NCCL for the gradient and weight collectives, one process per GPU
// started by mpirun (docs/DISTRIBUTED.md). Built when CMake finds NCCL and MPI next to the CUDA
// backend (STREAMBP_HAVE_NCCL).
//
// The ranks' host communicator (MPI) stays in charge of everything small and of process
// control: the NCCL communicator forwards sum/max/allgather/barrier/abort to it, and uses it
// once to hand rank 0's ncclUniqueId to every rank. The float collectives run on GPU memory,
// on a stream of their own that first waits for the backend's queued kernels (so a gradient is
// reduced after the kernels that wrote it), and complete through CUDA events.
//
// Wiring: run_training (train/trainer.cpp) gives rank r of a node GPU `cuda:N + r` and asks
// make_gpu_collectives (dist/world.h) for this communicator when the backend is cuda and there
// is more than one rank. DataParallel hands it F32 GPU tensors directly (zero 0, 1 and 2, weight
// gathers; distributed gradients are F32). Not yet run on a GPU.
#include <memory>

#include "backend/backend.h"
#include "dist/communicator.h"

namespace sbp {

// host: the MPI world of this run (outlives the result); backend: this rank's CUDA backend,
// whose device the NCCL communicator uses. Collective calls on all ranks (ncclCommInitRank).
// Throws InputError when `backend` is not a CUDA backend.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Backend& backend);

}  // namespace sbp
