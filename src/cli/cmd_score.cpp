#include "cli/commands.h"

namespace sbp::cli {

void register_score(CLI::App& app) { app.add_subcommand("score", "(not yet implemented)"); }

}  // namespace sbp::cli
