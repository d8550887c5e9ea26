#include "cli/run_cli.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "backend/blas_core_check.h"
#include "cli/commands.h"
#include "core/error.h"

namespace sbp::cli {

namespace {

// `streambp --version`: the version and the kernels this process multiplies with (the BLAS, the
// core it chose for this CPU, our attention kernels' instruction set), so that a report or a
// benchmark can name them; scripts/test.sh reads the core to check that OPENBLAS_CORETYPE took.
std::string version_text() {
  const cpu::BlasCoreCheck c = cpu::check_blas_core();
  std::string s = std::string("streambp ") + STREAMBP_VERSION + "\nblas: " + c.provider;
  if (!c.core.empty()) s += ", core " + c.core;
  if (c.generic) s += " (generic for this CPU)";
  return s + "\ncpu vectors: " + c.cpu_vectors + "\nattention: " + c.attention + "\nbf16 gemm: " + c.gemm_bf16;
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{"streambp: exact, memory-efficient long-sequence fine-tuning (StreamBP)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text);
  register_init(app);
  register_gradcheck(app);
  register_bench(app);
  register_train(app);
  register_tokenize(app);
  register_score(app);
  register_generate(app);
  register_plan(app);
  register_plot(app);
  register_merge(app);
  register_convert(app);
  register_eval(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
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

void run_command(const std::vector<std::string>& args, CommandOutput& out) {
  CLI::App app{"streambp"};
  app.require_subcommand(1);
  register_score(app, &out);
  register_generate(app, &out);
  register_plan(app, &out);
  std::vector<std::string> words = {"streambp"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    // The command line's own message (a flag unknown, missing or out of range), as an input error.
    throw InputError(std::string(e.what()));
  }
}

}  // namespace sbp::cli
