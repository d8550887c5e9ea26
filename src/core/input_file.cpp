#include "core/input_file.h"

#include <filesystem>

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

}  // namespace sbp
