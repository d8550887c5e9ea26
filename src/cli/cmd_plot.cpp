// streambp plot: a metrics JSONL file to a PNG/SVG of the loss curves (train/plot_metrics.h).
#include <cstdio>

#include "cli/commands.h"
#include "train/plot_metrics.h"

namespace sbp::cli {

void register_plot(CLI::App& app) {
  auto o = std::make_shared<PlotOptions>();
  CLI::App* c = app.add_subcommand(
      "plot", "Draw loss, eval loss and learning rate from a metrics JSONL file (needs gnuplot)");
  c->add_option("metrics", o->metrics, "metrics.jsonl written by `streambp train`")->required();
  c->add_option("-o,--out", o->out, "Image to write: .png (or .svg)")->required();
  c->add_option("--title", o->title, "Plot title (default: the metrics file name)");
  c->callback([o] {
    plot_metrics(*o);
    std::printf("plot: wrote %s\n", o->out.c_str());
  });
}

}  // namespace sbp::cli
