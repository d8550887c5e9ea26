#pragma once
// One function per `streambp` subcommand, each in its own cmd_<name>.cpp. A command's
// register function adds a CLI11 subcommand whose callback does the work; errors are
// thrown as sbp::Error and turned into a one-line message and exit code 1 by main().
// plan, score and generate can also hand their results to an embedding program instead of
// printing them (cli/command_output.h, cli/run_cli.h: the Python package).
#include <CLI/CLI.hpp>

namespace sbp::cli {

struct CommandOutput;

void register_init(CLI::App& app);
void register_gradcheck(CLI::App& app);
void register_bench(CLI::App& app);
void register_train(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_score(CLI::App& app, CommandOutput* out = nullptr);
void register_generate(CLI::App& app, CommandOutput* out = nullptr);
void register_plan(CLI::App& app, CommandOutput* out = nullptr);
void register_plot(CLI::App& app);
void register_merge(CLI::App& app);
void register_convert(CLI::App& app);
void register_eval(CLI::App& app);

// One line on standard error when the BLAS runs generic kernels on this CPU
// (backend/blas_core_check.h): bench, train and gradcheck call it first.
void warn_if_generic_blas();

}  // namespace sbp::cli
