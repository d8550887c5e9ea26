#include "cli/commands.h"

namespace sbp::cli {

void register_tokenize(CLI::App& app) {
  app.add_subcommand("tokenize", "(not yet implemented)");
}

}  // namespace sbp::cli
