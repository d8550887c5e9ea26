#pragma once
// `--cp N` on the commands that run a step (gradcheck, bench): the N ranks of `mpirun -np N` as
// one context group (docs/DISTRIBUTED.md "Context parallelism"), rank 0 reporting.
#include <cstdint>
#include <memory>

#include "core/communicator.h"

namespace sbp::cli {

// Null for cp = 1 (MPI is never initialised). Otherwise MPI's world, which must have cp ranks
// (InputError naming --cp otherwise); every rank but 0 has its stdout silenced, so that the
// command's report is printed once. `command` names the command in errors.
std::unique_ptr<Communicator> context_group_from_flag(int64_t cp, const char* command);

}  // namespace sbp::cli
