#include "core/input_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace sbp {

void check_input_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st) || fs::is_regular_file(st)) return;
  if (fs::is_directory(st)) throw InputError(path + ": is a directory, not a regular file");
  throw InputError(path +
                   ": is not a regular file (a FIFO, device or socket is not read: it could block "
                   "or never end)");
}

std::string read_input_file(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path + ": read failed");
  return ss.str();
}

}  // namespace sbp
