#include "cli/commands.h"

namespace sbp::cli {

void register_plan(CLI::App& app) { app.add_subcommand("plan", "(not yet implemented)"); }

}  // namespace sbp::cli
