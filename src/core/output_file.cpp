#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace sbp {

namespace fs = std::filesystem;

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

namespace {

bool is_stream(mode_t m) { return S_ISCHR(m) || S_ISFIFO(m); }

std::string kind_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file, character device or FIFO";
}

}  // namespace

OutputTarget output_target(const std::string& path) {
  if (path.empty()) throw InputError("an output path is empty");
  struct stat ls {};
  if (::lstat(path.c_str(), &ls) != 0) {
    if (errno == ENOENT) return {OutputTarget::replace, path};  // a new file
    throw InputError(path + ": cannot write: " + errno_message());
  }
  const bool link = S_ISLNK(ls.st_mode);
  struct stat st = ls;
  if (link && ::stat(path.c_str(), &st) != 0) {
    std::error_code ec;
    const std::string to = fs::read_symlink(path, ec).string();
    throw InputError(path + ": is a symlink to " + to + ", which " +
                     (errno == ENOENT ? "does not exist" : "cannot be followed (" +
                                                               errno_message() + ")") +
                     "; refusing to create a file where a link points");
  }
  if (S_ISREG(st.st_mode)) {
    if (!link) return {OutputTarget::replace, path};
    // Written through: the temporary is renamed over the file the link leads to.
    std::error_code ec;
    const fs::path file = fs::canonical(path, ec);
    if (ec) throw InputError(path + ": cannot resolve symlink: " + ec.message());
    return {OutputTarget::replace, file.string()};
  }
  if (is_stream(st.st_mode)) return {OutputTarget::stream, path};
  throw InputError(path + ": is " + kind_name(st.st_mode) + (link ? " (through a symlink)" : "") +
                   ", cannot write it");
}

OutputTarget output_target_in(const std::string& key, const std::string& path,
                              const std::string& dir) {
  std::error_code ec;
  const fs::path base = fs::absolute(dir, ec).lexically_normal();
  const fs::path rel = fs::absolute(path, ec).lexically_normal().lexically_relative(base);
  const bool inside = !rel.empty() && *rel.begin() != ".." && rel != ".";
  fs::path at = base;
  for (const fs::path& part : inside ? rel : fs::path()) {
    at /= part;
    struct stat ls {};
    if (::lstat(at.c_str(), &ls) != 0) break;  // absent from here on: created by the run
    if (!S_ISLNK(ls.st_mode)) continue;
    const std::string to = fs::read_symlink(at, ec).string();
    throw InputError(key + " " + path + ": " + at.string() + " is a symlink (to " + to +
                     ") inside output_dir " + dir +
                     "; refusing to write through it (remove the link, or name the file itself)");
  }
  try {
    return output_target(path);
  } catch (const InputError& e) {
    throw InputError(key + " " + e.what());
  }
}

OutputFile::OutputFile(const std::string& path) : path_(path), target_(output_target(path)) {
  if (target_.kind == OutputTarget::stream) {
    // No O_CREAT and no O_TRUNC: the node exists and is written as it is. A FIFO blocks here
    // until it has a reader, as a shell redirection does.
    fd_ = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0) throw InputError(path + ": cannot write: " + errno_message());
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !is_stream(st.st_mode)) {  // replaced since output_target()
      ::close(fd_);
      fd_ = -1;
      throw InputError(path + ": changed while being opened; not written");
    }
    return;
  }
  const fs::path file(target_.file);
  tmp_ = (file.parent_path() / ("." + file.filename().string() + ".tmp." +
                                std::to_string(::getpid())))
             .string();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(path + ": cannot write: " + errno_message());
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void OutputFile::write(const void* data, size_t n) {
  if (fd_ < 0) throw InputError(path_ + ": write after close");
  if (!write_all(fd_, data, n)) throw InputError(path_ + ": cannot write: " + errno_message());
}

void OutputFile::commit() {
  // Every step's result counts: a full disk or quota may surface only at fsync() or close().
  // A device or FIFO has nothing to fsync (a pipe refuses it with EINVAL).
  const bool replace = target_.kind == OutputTarget::replace;
  const bool synced = !replace || ::fsync(fd_) == 0;
  const std::string why = synced ? std::string() : errno_message();
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!synced || !closed) throw InputError(path_ + ": cannot write: " + (synced ? errno_message() : why));
  if (!replace) {
    committed_ = true;
    return;
  }
  if (::rename(tmp_.c_str(), target_.file.c_str()) != 0)
    throw InputError(path_ + ": cannot write: " + errno_message());
  committed_ = true;
  // Makes the rename durable (best effort: some file systems refuse fsync on a directory).
  const std::string dir = fs::path(target_.file).parent_path().string();
  const int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  OutputFile f(path);
  f.write(text);
  f.commit();
}

}  // namespace sbp
