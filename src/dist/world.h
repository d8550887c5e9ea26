#pragma once
// The communicator of this process's run: MPI's world when the process was started by an MPI
// launcher (mpirun / mpiexec / srun), else one process on its own — so `streambp train` outside
// mpirun never initialises MPI and behaves exactly as a single-process program.
#include <memory>

#include "backend/backend.h"
#include "dist/communicator.h"

namespace sbp {

// True when the environment says an MPI launcher started this process (OpenMPI's
// OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, MPICH/Hydra's and Slurm's PMI_SIZE).
bool launched_by_mpi();

// Whether this build has MPI (CMake found it).
bool built_with_mpi();

// This process's rank among those of its node (OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's
// SLURM_LOCALID, MPICH's MPI_LOCALRANKID); 0 when none is set.
int local_rank();

// The communicator a GPU rank's fp32 collectives should use: NCCL over `world` when the build
// has it, `world` has more than one rank and `be` is a CUDA backend; nullptr otherwise (then
// `world` itself, which stages GPU tensors through host copies).
std::unique_ptr<Communicator> make_gpu_collectives(Communicator& world, Backend& be);

// MPI_Init + the world communicator (finalised when the object is destroyed) when launched by
// MPI; otherwise a SingleProcess. Throws InputError when launched by MPI in a build without it.
std::unique_ptr<Communicator> make_world_communicator();

}  // namespace sbp
