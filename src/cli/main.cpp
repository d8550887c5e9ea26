// The `streambp` program: dispatches to the subcommands in cli/cmd_*.cpp.
#include <malloc.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "backend/blas_core_check.h"
#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  // First: OpenBLAS's generic fallback on a CPU it does not know is corrected by re-executing
  // with OPENBLAS_CORETYPE set, before any kernel runs (blas_core_check.h).
  sbp::cpu::choose_blas_core(argv);
  // Every buffer of 128 KiB or more gets its own mapping and goes back to the system when
  // freed. glibc would otherwise raise this threshold after the first large free and serve
  // later buffers from the heap, where freed memory stays resident: the process would then
  // use more memory than the ledger (and `streambp plan`) accounts for.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  CLI::App app{"streambp: exact, memory-efficient long-sequence fine-tuning (StreamBP)"};
  app.require_subcommand(1);
  sbp::cli::register_init(app);
  sbp::cli::register_gradcheck(app);
  sbp::cli::register_bench(app);
  sbp::cli::register_train(app);
  sbp::cli::register_tokenize(app);
  sbp::cli::register_score(app);
  sbp::cli::register_generate(app);
  sbp::cli::register_plan(app);
  sbp::cli::register_plot(app);
  sbp::cli::register_merge(app);
  sbp::cli::register_convert(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    // A command's own non-zero exit (e.g. a failed gradcheck): app.exit turns it into its exit
    // code without printing anything.
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A malformed command line (a flag that is not a number, out of its range, missing): one line
    // and exit 1 like every other input error, not CLI11's two lines and codes 101-115.
    std::fprintf(stderr, "streambp: error: %s (see streambp --help)\n", e.what());
    return 1;
  } catch (const sbp::Error& e) {
    std::fprintf(stderr, "streambp: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // A host-side allocation outside the Pool (a vector, a parsed file): the machine is out of
    // memory, which is not a bug; the Pool's own failures are OutOfMemoryError (sbp::Error).
    std::fprintf(stderr, "streambp: error: out of memory: a host allocation failed\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streambp: internal error: %s\n", e.what());
    return 3;
  }
  // What a command printed (tokenize's ids, plan's table) counts only if it got out: a full disk
  // or a closed pipe behind standard output must not end in exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "streambp: error: cannot write standard output: %s\n",
                 std::strerror(errno));
    return 1;
  }
  return 0;
}
