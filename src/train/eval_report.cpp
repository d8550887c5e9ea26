#include "train/eval_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "train/gnuplot.h"

namespace sbp {

namespace {

namespace fs = std::filesystem;

// The distinct lengths and depths of the cells, in first-seen order (run_passkey's order).
template <class T, class F>
std::vector<T> distinct(const std::vector<PasskeyCell>& cells, F field) {
  std::vector<T> out;
  for (const PasskeyCell& c : cells)
    if (std::find(out.begin(), out.end(), field(c)) == out.end()) out.push_back(field(c));
  return out;
}

const PasskeyCell* find_cell(const std::vector<PasskeyCell>& cells, int64_t L, double d) {
  for (const PasskeyCell& c : cells)
    if (c.length == L && c.depth == d) return &c;
  return nullptr;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

std::string passkey_table(const std::vector<PasskeyCell>& cells) {
  const auto lengths = distinct<int64_t>(cells, [](const PasskeyCell& c) { return c.length; });
  const auto depths = distinct<double>(cells, [](const PasskeyCell& c) { return c.depth; });
  std::ostringstream s;
  s << "passkey: keys found by greedy decoding (found/trials) and the key's log-prob\n";
  s << "depth  ";
  for (int64_t L : lengths) s << " | " << fmt("%17.0f", static_cast<double>(L));
  s << "\n";
  for (double d : depths) {
    s << fmt("%5.2f  ", d);
    for (int64_t L : lengths) {
      const PasskeyCell* c = find_cell(cells, L, d);
      s << " | "
        << (c ? fmt("%3.0f/", static_cast<double>(c->found)) +
                    fmt("%-3.0f", static_cast<double>(c->trials)) + fmt(" %9.3f", c->key_logp)
              : std::string(17, ' '));
    }
    s << "\n";
  }
  s << "total  ";
  for (int64_t L : lengths) {
    int64_t f = 0, n = 0;
    for (const PasskeyCell& c : cells)
      if (c.length == L) f += c.found, n += c.trials;
    s << " | " << fmt("%16.0f%%", n > 0 ? 100.0 * static_cast<double>(f) / n : 0.0);
  }
  s << "\n";
  return s.str();
}

std::string perplexity_table(const std::vector<PositionBucket>& buckets) {
  std::ostringstream s;
  s << "perplexity by position of the predicted token\n";
  s << "positions            tokens     mean NLL   perplexity\n";
  for (const PositionBucket& b : buckets) {
    if (b.tokens == 0) continue;
    char line[160];
    std::snprintf(line, sizeof line, "[%8lld, %8lld)  %8lld  %10.4f  %11.3f\n",
                  static_cast<long long>(b.begin), static_cast<long long>(b.end),
                  static_cast<long long>(b.tokens), b.mean_nll(), std::exp(b.mean_nll()));
    s << line;
  }
  return s.str();
}

nlohmann::json passkey_json(const std::vector<PasskeyCell>& cells) {
  nlohmann::json a = nlohmann::json::array();
  for (const PasskeyCell& c : cells)
    a.push_back({{"length", c.length},
                 {"depth", c.depth},
                 {"trials", c.trials},
                 {"found", c.found},
                 {"accuracy", static_cast<double>(c.found) / static_cast<double>(c.trials)},
                 {"key_logp", c.key_logp},
                 {"key_tokens", c.key_tokens}});
  return a;
}

nlohmann::json perplexity_json(const std::vector<PositionBucket>& buckets) {
  nlohmann::json a = nlohmann::json::array();
  for (const PositionBucket& b : buckets)
    a.push_back(
        {{"begin", b.begin},
         {"end", b.end},
         {"tokens", b.tokens},
         {"mean_nll", b.tokens > 0 ? nlohmann::json(b.mean_nll()) : nlohmann::json()},
         {"perplexity", b.tokens > 0 ? nlohmann::json(std::exp(b.mean_nll())) : nlohmann::json()}});
  return a;
}

void write_passkey_heatmap(const std::vector<PasskeyCell>& cells, const std::string& out,
                           const std::string& title, const std::string& gnuplot) {
  const std::string ext = fs::path(out).extension().string();
  const std::string out_name = printable(out);
  if (ext != ".png" && ext != ".svg")
    throw InputError("--heatmap " + out_name + ": the image must be a .png or .svg file");
  output_target(out);
  const std::string title_q = gnuplot_string(title, "heat map title");
  gnuplot_string(out, "--heatmap " + out_name);
  if (cells.empty()) throw InputError("--heatmap: no passkey cells to draw");
  const std::string program = find_program(gnuplot);
  if (program.empty())
    throw InputError(
        "eval: gnuplot not found in PATH; install it (Debian/Ubuntu: apt-get "
        "install gnuplot-nox, which scripts/setup.sh does)");
  const auto lengths = distinct<int64_t>(cells, [](const PasskeyCell& c) { return c.length; });
  const auto depths = distinct<double>(cells, [](const PasskeyCell& c) { return c.depth; });

  // One line per cell: column index, row index, accuracy, label.
  std::ostringstream data;
  for (size_t j = 0; j < depths.size(); ++j)
    for (size_t i = 0; i < lengths.size(); ++i) {
      const PasskeyCell* c = find_cell(cells, lengths[i], depths[j]);
      if (!c) continue;
      data << i << ' ' << j << ' ' << static_cast<double>(c->found) / c->trials << " \"" << c->found
           << '/' << c->trials << "\"\n";
    }
  auto script_for = [&](const std::string& terminal,
                        const std::map<std::string, std::string>& paths) {
    const std::string& data_q = paths.at("cells.dat");
    std::ostringstream s;
    // Wide enough for a title of a model path and the scaling, however few the lengths.
    s << "set terminal " << terminal << " size "
      << std::max<size_t>(720, 160 + 110 * lengths.size()) << "," << 160 + 60 * depths.size()
      << "\n"
      << "set output " << paths.at("image") << "\nset title " << title_q << " font ',10'\n"
      << "set xlabel 'length (tokens)'\nset ylabel 'depth of the key'\n"
      << "set cbrange [0:1]\nset cblabel 'keys found'\n"
      << "set palette defined (0 '#b2182b', 0.5 '#f7f7f7', 1 '#2166ac')\n"
      << "set xrange [-0.5:" << lengths.size() - 0.5 << "]\n"
      << "set yrange [" << depths.size() - 0.5 << ":-0.5]\n"
      << "set xtics (";
    for (size_t i = 0; i < lengths.size(); ++i)
      s << (i ? ", " : "") << "'" << lengths[i] << "' " << i;
    s << ")\nset ytics (";
    for (size_t j = 0; j < depths.size(); ++j)
      s << (j ? ", " : "") << "'" << fmt("%.2f", depths[j]) << "' " << j;
    // One box per cell (not `with image`, which needs every cell of the grid: a length run at
    // fewer depths leaves its others blank).
    s << ")\nplot " << data_q
      << " using 1:2:(0.5):(0.5):3 with boxxyerror fs solid 1.0 noborder fc palette notitle, "
      << data_q << " using 1:2:4 with labels notitle\nset output\n";
    return s.str();
  };
  draw_with_gnuplot(program, out, "eval", {{"cells.dat", data.str()}}, script_for);
}

}  // namespace sbp
