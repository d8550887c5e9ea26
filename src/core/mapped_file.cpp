#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"

namespace sbp {

namespace {

// Closes a file descriptor on scope exit (the error paths included).
struct FdGuard {
  int fd = -1;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

MappedFile::MappedFile(const std::string& path, const MappedFormat& format) {
  check_input_file(path);
  FdGuard fd;
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0)
    throw InputError(path + ": cannot open " + format.file + ": " + errno_message());
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) throw InputError(path + ": cannot stat: " + errno_message());
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < format.min_bytes)
    throw InputError(path + ": file is " + std::to_string(size) + " bytes, shorter than the " +
                     std::to_string(format.min_bytes) + "-byte " + format.min_what);
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (m == MAP_FAILED) throw InputError(path + ": cannot mmap: " + errno_message());
  bytes_ = static_cast<const unsigned char*>(m);
  size_ = size;
}

MappedFile::~MappedFile() {
  ::munmap(const_cast<unsigned char*>(bytes_), static_cast<size_t>(size_));
}

void MappedFile::advise_sequential() const {
  ::madvise(const_cast<unsigned char*>(bytes_), static_cast<size_t>(size_), MADV_SEQUENTIAL);
}

}  // namespace sbp
