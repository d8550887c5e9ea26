#pragma once
// Running gnuplot safely (streambp plot, streambp eval's heat map): finding the program, quoting
// every string that enters a script, and running a script file.
#include <functional>
#include <map>
#include <string>

namespace sbp {

// The program's path, searched in PATH like a shell would ("" when absent).
std::string find_program(const std::string& name);

// `s` as one single-quoted gnuplot string; control characters are refused naming `what` (a
// newline would end the string and run the rest of the line as script).
std::string gnuplot_string(const std::string& s, const std::string& what);

// `s` with control characters shown as '?' (a name for a one-line message or a default title).
std::string printable(std::string s);

// Runs `program script` and returns its exit status, collecting its output.
int run_gnuplot(const std::string& program, const std::string& script, std::string& output);

// Draws one image (streambp plot, streambp eval's heat map) with `program`, found by
// find_program: `data` (file name -> contents) is written into a private temporary directory,
// `script(terminal, paths)` builds the script for a terminal, with `paths` the quoted paths of
// the data files by name and, under "image", of the image gnuplot writes. The terminal follows
// `out`'s extension (.svg: svg; else pngcairo, then png for a gnuplot built without cairo). The
// finished image goes to `out` through the one output rule (core/output_file.h), so a failed
// gnuplot leaves nothing under that name; the directory is removed. Errors start with `what`.
using GnuplotScript = std::function<std::string(const std::string& terminal,
                                                const std::map<std::string, std::string>& paths)>;
void draw_with_gnuplot(const std::string& program, const std::string& out, const std::string& what,
                       const std::map<std::string, std::string>& data,
                       const GnuplotScript& script);

}  // namespace sbp
