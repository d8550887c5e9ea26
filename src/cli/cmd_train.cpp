// streambp train: with no arguments, the built-in demo (train/demo.h).
#include "cli/commands.h"
#include "train/demo.h"

namespace sbp::cli {

void register_train(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* c = app.add_subcommand(
      "train", "Train; with no arguments, the built-in long-range retrieval demo");
  c->add_option("--steps", o->steps, "Optimizer steps");
  c->add_option("--seq-len", o->seq_len, "Tokens per sequence");
  c->add_option("--lr", o->lr, "Peak learning rate");
  c->add_option("--warmup", o->warmup, "Warmup steps");
  c->add_option("--eval-every", o->eval_every, "Evaluate every N steps");
  c->add_option("--layer-chunk", o->layer_chunk, "Stream-mode chunk length");
  c->add_option("--head-chunk", o->head_chunk, "LM-head chunk length");
  c->add_option("--hidden", o->hidden, "Demo model width");
  c->add_option("--layers", o->layers, "Demo model depth");
  c->add_option("--heads", o->heads, "Demo model attention heads");
  c->add_option("--pairs", o->num_pairs, "Key/value pairs per sequence");
  c->add_option("--queries", o->num_queries, "Queries at the end of each sequence");
  c->add_option("--seed", o->seed, "Seed");
  c->add_option("--threads", o->threads, "Threads (default: all)");
  c->add_option("--out", o->out, "Where to save the trained model");
  c->callback([o] {
    const int rc = run_demo(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sbp::cli
