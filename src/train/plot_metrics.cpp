#include "train/plot_metrics.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/untrusted_json.h"
#include "train/gnuplot.h"

namespace sbp {

namespace {

namespace fs = std::filesystem;

}  // namespace

void plot_metrics(const PlotOptions& o) {
  // The terminal follows the extension; another one got a PNG under its name without a word.
  const std::string ext = fs::path(o.out).extension().string();
  const std::string out_name = printable(o.out);  // for messages, which stay on one line
  if (ext != ".png" && ext != ".svg")
    throw InputError("-o " + out_name + ": the image must be a .png or .svg file");
  const fs::path parent = fs::path(o.out).parent_path();
  if (!parent.empty() && !fs::is_directory(parent))
    throw InputError("-o " + out_name + ": " + printable(parent.string()) + " is not a directory");
  // Strings for the script are checked before anything is read or created.
  const std::string title =
      o.title.empty() ? printable(fs::path(o.metrics).filename().string()) : o.title;
  // gnuplot draws into the private temporary directory; the finished image then goes to -o
  // through the one output rule (core/output_file.h: replaced whole, a symlink written through,
  // a device streamed, anything else refused), so a failed or interrupted gnuplot leaves
  // nothing under the name asked for. The target is judged now, before any work.
  output_target(o.out);
  const std::string title_q = gnuplot_string(title, "--title");
  gnuplot_string(o.out, "-o " + out_name);  // control characters in -o: refused like a title
  check_input_file(o.metrics);
  std::ifstream in(o.metrics);
  if (!in) throw InputError(o.metrics + ": cannot open metrics file");
  std::ostringstream loss, eval, lr;
  int64_t n_loss = 0, n_eval = 0, n_lr = 0, line_no = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = parse_untrusted_json_or_discarded(line);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number())
      throw InputError(o.metrics + ":" + std::to_string(line_no) +
                       ": not a metrics line (a JSON object with \"step\")");
    const double step = j["step"].get<double>();
    if (j.contains("loss") && j["loss"].is_number()) {
      loss << step << ' ' << j["loss"].get<double>() << '\n';
      ++n_loss;
    }
    if (j.contains("lr") && j["lr"].is_number()) {
      lr << step << ' ' << j["lr"].get<double>() << '\n';
      ++n_lr;
    }
    if (j.contains("eval_loss") && j["eval_loss"].is_number()) {
      eval << step << ' ' << j["eval_loss"].get<double>() << '\n';
      ++n_eval;
    }
  }
  if (n_loss == 0 && n_eval == 0) throw InputError(o.metrics + ": no loss values to plot");

  const std::string program = find_program(o.gnuplot);
  if (program.empty()) {
    throw InputError(
        "plot: gnuplot not found in PATH; install it (Debian/Ubuntu: apt-get install "
        "gnuplot-nox, which scripts/setup.sh does)");
  }

  // Data and script in a private temporary directory, removed afterwards (train/gnuplot.h).
  auto script_for = [&](const std::string& terminal,
                        const std::map<std::string, std::string>& paths) {
    const std::string& loss_q = paths.at("loss.dat");
    const std::string& eval_q = paths.at("eval.dat");
    const std::string& lr_q = paths.at("lr.dat");
    std::ostringstream s;
    s << "set terminal " << terminal << " size 1000,750\n"
      << "set output " << paths.at("image") << "\n"
      << "set multiplot layout 2,1 title " << title_q << "\n"
      << "set grid\nset key top right\nset xlabel 'step'\nset ylabel 'loss'\n"
      << "set lmargin 12\nset size 1,0.62\nset origin 0,0.35\n";
    std::vector<std::string> series;
    if (n_loss) series.push_back(loss_q + " using 1:2 with lines lw 1.5 title 'train loss'");
    if (n_eval)
      series.push_back(eval_q + " using 1:2 with linespoints pt 7 ps 0.7 lw 2 title 'eval loss'");
    s << "plot ";
    for (size_t i = 0; i < series.size(); ++i) s << (i ? ", " : "") << series[i];
    s << "\nset size 1,0.33\nset origin 0,0\nset ylabel 'learning rate'\nset format y '%.1e'\n";
    // Without learning rates (metrics lines written by hand, or eval-only lines) gnuplot fails
    // on an empty lr.dat with "x range is invalid": the panel is left out instead.
    if (n_lr) s << "plot " << lr_q << " using 1:2 with lines lw 1.5 title 'lr'\n";
    s << "unset multiplot\nset output\n";
    return s.str();
  };
  draw_with_gnuplot(program, o.out, "plot",
                    {{"loss.dat", loss.str()}, {"eval.dat", eval.str()}, {"lr.dat", lr.str()}},
                    script_for);
}

}  // namespace sbp
