#include "cli/context_flag.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "dist/world.h"

namespace sbp::cli {

std::unique_ptr<Communicator> context_group_from_flag(int64_t cp, const char* command) {
  if (cp <= 1) return nullptr;
  std::unique_ptr<Communicator> world = make_world_communicator();
  if (world->size() != cp)
    throw InputError("--cp " + std::to_string(cp) + ": run under mpirun -np " + std::to_string(cp) +
                     " (this run has " + std::to_string(world->size()) + " process" +
                     (world->size() == 1 ? "" : "es") + ")");
  if (world->rank() != 0 && !std::freopen("/dev/null", "w", stdout))
    throw Error(std::string(command) + ": cannot silence rank " + std::to_string(world->rank()));
  return world;
}

}  // namespace sbp::cli
