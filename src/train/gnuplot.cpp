#include "train/gnuplot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"

namespace sbp {

namespace {

// A word for /bin/sh: single-quoted, with embedded quotes closed and escaped.
std::string shell_word(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

// The program's path, searched in PATH like a shell would ("" when absent).
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string full = dir + "/" + name;
    if (access(full.c_str(), X_OK) == 0) return full;
  }
  return "";
}

// Every string that enters the gnuplot script goes through here, as one single-quoted gnuplot
// string: inside one, only ' is special (doubled), and neither backquote substitution nor @macros
// happen. A newline (or CR) would end the string and the command, and the rest of the line
// would run as script (`system "..."`): control characters are refused, naming `what`.
std::string gnuplot_string(const std::string& s, const std::string& what) {
  std::string out = "'";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      throw InputError(what + ": contains a control character (newline, tab, ...), which a " +
                       "gnuplot script cannot hold");
    out += c == '\'' ? std::string("''") : std::string(1, c);
  }
  return out + "'";
}

// The default title, the metrics file's name, may hold any byte: control characters are shown
// as '?' rather than refusing a file that is otherwise fine.
std::string printable(std::string s) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return s;
}

// Runs `program script` and returns its exit status, collecting its output.
int run_gnuplot(const std::string& program, const std::string& script, std::string& output) {
  FILE* p = popen((shell_word(program) + " " + shell_word(script) + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void draw_with_gnuplot(const std::string& program, const std::string& out, const std::string& what,
                       const std::map<std::string, std::string>& data,
                       const GnuplotScript& script) {
  namespace fs = std::filesystem;
  const std::string ext = fs::path(out).extension().string();
  std::string tmpl = (fs::temp_directory_path() / ("streambp-" + what + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw InputError(what + ": cannot create a temporary directory");
  const fs::path tmp(tmpl);
  auto remove_tmp = [&] {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  };
  const std::string partial = (tmp / ("image" + ext)).string();
  const std::string script_path = (tmp / "draw.gp").string();
  std::map<std::string, std::string> paths;
  try {  // TMPDIR is the user's too: its name is quoted like any other string
    for (const auto& [name, text] : data) {
      write_file_atomically((tmp / name).string(), text);
      paths[name] = gnuplot_string((tmp / name).string(), what + ": temporary directory");
    }
    paths["image"] = gnuplot_string(partial, what + ": temporary directory");
  } catch (const InputError&) {
    remove_tmp();
    throw;
  }
  std::string output;
  int rc = -1;
  for (const std::string& terminal : ext == ".svg" ? std::vector<std::string>{"svg"}
                                                   : std::vector<std::string>{"pngcairo", "png"}) {
    write_file_atomically(script_path, script(terminal, paths));
    output.clear();
    rc = run_gnuplot(program, script_path, output);
    if (rc == 0) break;
  }
  std::string image;
  if (rc == 0) {
    try {
      image = read_input_file(partial);
    } catch (const InputError&) {
      rc = -1;
      output = "it wrote no image";
    }
  }
  remove_tmp();
  if (rc != 0) {
    while (!output.empty() && (output.back() == '\n' || output.back() == '\r')) output.pop_back();
    for (char& ch : output)
      if (ch == '\n' || ch == '\r') ch = ' ';
    throw InputError(what + ": gnuplot failed (exit " + std::to_string(rc) + "): " + output);
  }
  write_file_atomically(out, image);
}

}  // namespace sbp
