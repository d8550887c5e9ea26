#include "cli/commands.h"

namespace sbp::cli {

void register_init(CLI::App& app) {
  app.add_subcommand("init", "(not yet implemented)");
}

}  // namespace sbp::cli
