#pragma once
// `streambp plot`: draws a metrics JSONL file (train/metrics.h) with gnuplot — loss and eval loss
// against the step on top, the learning rate below — into a PNG (or SVG for a .svg name).
#include <string>

namespace sbp {

struct PlotOptions {
  std::string metrics;              // metrics.jsonl
  std::string out;                  // loss.png | loss.svg
  std::string title;                // "" = the metrics file name
  std::string gnuplot = "gnuplot";  // program, looked up in PATH
};

// Throws InputError for an unreadable or empty metrics file, a missing gnuplot (naming the
// package to install) or a gnuplot failure (with its message).
void plot_metrics(const PlotOptions& opts);

}  // namespace sbp
