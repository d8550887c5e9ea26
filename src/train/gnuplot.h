#pragma once
// Running gnuplot safely (streambp plot, streambp eval's heat map): finding the program, quoting
// every string that enters a script, and running a script file.
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

}  // namespace sbp
