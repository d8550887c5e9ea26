#include "cli/commands.h"

namespace sbp::cli {

void register_train(CLI::App& app) {
  app.add_subcommand("train", "(not yet implemented)");
}

}  // namespace sbp::cli
