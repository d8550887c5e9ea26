#include "dist/world.h"

#include <cstdlib>

#include "core/error.h"
#include "dist/mpi_communicator.h"
#if defined(STREAMBP_HAVE_NCCL)
#include "dist/nccl_communicator.h"
#endif

namespace sbp {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

bool built_with_mpi() {
#ifdef STREAMBP_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const char* s = std::getenv(v);
    if (s && *s) return std::atoi(s);
  }
  return 0;
}

std::unique_ptr<Communicator> make_gpu_collectives(Communicator& world, Backend& be) {
#if defined(STREAMBP_HAVE_NCCL)
  if (world.size() > 1 && be.name().starts_with("cuda")) return make_nccl_communicator(world, be);
#endif
  return nullptr;
}

std::unique_ptr<Communicator> make_world_communicator() {
  if (!launched_by_mpi()) return std::make_unique<SingleProcess>();
#ifdef STREAMBP_HAVE_MPI
  return make_mpi_communicator();
#else
  throw InputError(
      "started by an MPI launcher, but this streambp was built without MPI (install libopenmpi-dev "
      "and rebuild: scripts/setup.sh, scripts/build.sh)");
#endif
}

}  // namespace sbp
