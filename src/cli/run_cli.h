#pragma once
// The `streambp` command line, callable from inside a process: main() runs it, and so does the
// Python package's console script (python/src/), which is why it lives in the library.
#include <string>
#include <vector>

#include "cli/command_output.h"

namespace sbp::cli {

// argv[0] is the program's name. Prints errors as one line on stderr and returns the exit code
// (0, 1 for bad input, 3 for an internal error, 130 after a stop signal, a command's own code).
int run_cli(int argc, char** argv);

// One of plan, score, generate on `args` (the command's name first, then its flags as on the
// command line), its results in `out` (cli/command_output.h). Bad flags and bad input throw
// sbp::InputError with the command line's one-line message; other failures as the command does.
void run_command(const std::vector<std::string>& args, CommandOutput& out);

}  // namespace sbp::cli
