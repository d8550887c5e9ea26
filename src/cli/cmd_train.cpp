// streambp train: with no arguments, the built-in demo (train/demo.h); with a YAML config,
// a real run (train/trainer.h):
//   streambp train CONFIG.yaml [key=value ...] [--resume DIR]
//   streambp train --resume DIR [key=value ...]      (the checkpoint's own config)
//   mpirun -np N streambp train CONFIG.yaml ...      (data parallel, docs/DISTRIBUTED.md)
#include <cstdio>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/run_config.h"
#include "core/error.h"
#include "dist/rank_agreement.h"
#include "dist/world.h"
#include "train/demo.h"
#include "train/trainer.h"

namespace sbp::cli {

namespace {

struct TrainArgs {
  DemoOptions demo;
  std::vector<std::string> positional;  // CONFIG.yaml first (optional), then key=value overrides
  std::string resume;
};

const char* const kDemoFlags[] = {"--steps",      "--seq-len",     "--lr",         "--warmup",
                                  "--eval-every", "--layer-chunk", "--head-chunk", "--hidden",
                                  "--layers",     "--heads",       "--pairs",      "--queries",
                                  "--filler",     "--seed",        "--threads",    "--out"};

int run_config(CLI::App* c, const TrainArgs& a, Communicator& world) {
  for (const char* flag : kDemoFlags) {
    if (c->count(flag) > 0)
      throw InputError(std::string("train: ") + flag +
                       " is a demo option; with a config file set "
                       "keys instead (e.g. seed=1, or demo.steps=20 in a demo config)");
  }
  const TrainConfig cfg = load_run_config(a.positional, a.resume);
  // TensorBoard's event files and W&B's runs are written through their own Python libraries,
  // which the program does not embed: refused before anything runs rather than ignored.
  if (!cfg.report_to.empty())
    throw InputError(cfg.where("report_to") + ": report_to: " + cfg.report_to.front() +
                     " is written by the Python package: run this config with "
                     "streambp.train(\"" + (a.positional.empty() ? std::string("CONFIG.yaml") : a.positional.front()) +
                     "\") (docs/PYTHON.md \"report_to\"); the program writes metrics.jsonl only");
  return run_training(cfg, a.resume, world);
}

// One process: as always. Under an MPI launcher: MPI for the run's length; an error on any rank
// is printed with its rank and ends every rank (the others may be waiting in a collective, where
// they would wait for ever) — except ranks that disagree on the run, which all know it at once.
int run(CLI::App* c, const TrainArgs& a) {
  const std::unique_ptr<Communicator> world = make_world_communicator();
  if (world->rank() == 0) warn_if_generic_blas();
  if (world->size() == 1)
    return a.positional.empty() && a.resume.empty() ? run_demo(a.demo) : run_config(c, a, *world);
  try {
    if (a.positional.empty() && a.resume.empty())
      throw InputError(
          "train: the built-in demo runs on one process; give a CONFIG.yaml to train with mpirun");
    return run_config(c, a, *world);
  } catch (const RanksDisagree& e) {
    // Every rank found the same disagreement in the same collective: each says so and ends by
    // itself, with MPI finalised (no rank is left waiting, so no MPI_Abort).
    std::fprintf(stderr, "streambp: error: rank %d of %d: %s\n", world->rank(), world->size(),
                 e.what());
    std::fflush(stderr);
    return 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "streambp: error: rank %d of %d: %s\n", world->rank(), world->size(),
                 e.what());
    std::fflush(stderr);
    world->abort(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "streambp: internal error: rank %d of %d: %s\n", world->rank(),
                 world->size(), e.what());
    std::fflush(stderr);
    world->abort(3);
  }
  return 1;  // not reached: abort() ends the process
}

}  // namespace

void register_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  DemoOptions* o = &a->demo;
  CLI::App* c = app.add_subcommand(
      "train",
      "Train from a YAML config (CONFIG.yaml [key=value ...] [--resume DIR]); with no arguments, "
      "the built-in long-range retrieval demo");
  c->add_option("config", a->positional,
                "CONFIG.yaml, then key=value overrides (dotted keys, e.g. optim.lr=1e-4); see "
                "docs/TRAINING.md");
  c->add_option(
      "--resume", a->resume,
      "Continue from a checkpoint directory, or from the newest checkpoint in an output directory");
  // The same ranges as the demo.* keys (train/config_keys.cpp): a negative chunk or thread
  // count used to run, and --steps 0 trained nothing.
  c->add_option("--steps", o->steps, "Demo: optimizer steps")->check(int_in(1, int64_t{1} << 53));
  c->add_option("--seq-len", o->seq_len, "Demo: tokens per sequence")
      ->check(int_in(16, int64_t{1} << 20));
  c->add_option("--lr", o->lr, "Demo: peak learning rate")->check(positive_finite(1e3));
  c->add_option("--warmup", o->warmup, "Demo: warmup steps")->check(int_in(0, int64_t{1} << 53));
  c->add_option("--eval-every", o->eval_every, "Demo: evaluate every N steps")
      ->check(int_in(0, int64_t{1} << 53));
  c->add_option("--layer-chunk", o->layer_chunk, "Demo: stream-mode chunk length")
      ->check(int_in(1, int64_t{1} << 20));
  c->add_option("--head-chunk", o->head_chunk, "Demo: LM-head chunk length")
      ->check(int_in(1, int64_t{1} << 20));
  c->add_option("--hidden", o->hidden, "Demo model width")->check(int_in(1, int64_t{1} << 16));
  c->add_option("--layers", o->layers, "Demo model depth")->check(int_in(1, 4096));
  c->add_option("--heads", o->heads, "Demo model attention heads")->check(int_in(1, 4096));
  c->add_option("--pairs", o->num_pairs, "Demo: key/value pairs per sequence")
      ->check(int_in(1, int64_t{1} << 20));
  c->add_option("--queries", o->num_queries, "Demo: queries at the end of each sequence")
      ->check(int_in(1, int64_t{1} << 20));
  c->add_option("--filler", o->num_filler, "Demo: distinct filler tokens")
      ->check(int_in(0, int64_t{1} << 20));
  c->add_option("--seed", o->seed, "Demo: seed")->check(uint64_flag());
  c->add_option("--threads", o->threads, "Demo: threads (default: all)")->check(int_in(0, 4096));
  c->add_option("--out", o->out, "Demo: where to save the trained model")->check(non_empty());
  c->callback([a, c] {
    const int rc = run(c, *a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli
