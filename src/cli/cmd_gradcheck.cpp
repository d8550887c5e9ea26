#include "cli/commands.h"

namespace sbp::cli {

void register_gradcheck(CLI::App& app) {
  app.add_subcommand("gradcheck", "(not yet implemented)");
}

}  // namespace sbp::cli
