#include "cli/commands.h"

namespace sbp::cli {

void register_bench(CLI::App& app) {
  app.add_subcommand("bench", "(not yet implemented)");
}

}  // namespace sbp::cli
