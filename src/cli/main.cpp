// The `streambp` program: dispatches to the subcommands in cli/cmd_*.cpp.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"streambp: exact, memory-efficient long-sequence fine-tuning (StreamBP)"};
  app.require_subcommand(1);
  sbp::cli::register_init(app);
  sbp::cli::register_gradcheck(app);
  sbp::cli::register_bench(app);
  sbp::cli::register_train(app);
  sbp::cli::register_tokenize(app);
  sbp::cli::register_score(app);
  sbp::cli::register_plan(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own non-zero exit (e.g. a failed check)
    return e.get_exit_code();
  } catch (const sbp::Error& e) {
    std::fprintf(stderr, "streambp: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streambp: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
