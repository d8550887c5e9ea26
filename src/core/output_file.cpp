#include "core/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace sbp {

std::string errno_message() { return std::strerror(errno); }

bool write_all(int fd, const std::string& text) { return write_all(fd, text.data(), text.size()); }

bool write_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec)) throw InputError(path + ": is a directory, cannot write it");
  const fs::path tmp = target.parent_path() / ("." + target.filename().string() + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path + ": cannot write: " + errno_message());
  // Every step's result counts: write() may accept less than asked, and a full disk or quota may
  // surface only at fsync() or close().
  bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const std::string why = ok ? std::string() : errno_message();
  const bool closed = ::close(fd) == 0;
  std::string reason = !ok ? why : !closed ? errno_message() : std::string();
  if (ok && closed) {
    fs::rename(tmp, target, ec);
    if (!ec) return;
    reason = ec.message();
  }
  fs::remove(tmp, ec);
  throw InputError(path + ": cannot write: " + reason);
}

}  // namespace sbp
