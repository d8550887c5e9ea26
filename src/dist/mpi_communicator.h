#pragma once
// MPI's world communicator (only in builds with MPI: STREAMBP_HAVE_MPI). The one place that
// includes <mpi.h>; MPI's own process-wide state (MPI_Init .. MPI_Finalize) is owned by the
// returned object.
#include <memory>

#include "dist/communicator.h"

namespace sbp {

// MPI_Init_thread (funneled: only the main thread calls MPI; OpenMP threads never do), then
// MPI_COMM_WORLD. MPI_Finalize when destroyed.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace sbp
