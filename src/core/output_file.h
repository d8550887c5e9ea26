#pragma once
// Output files are written whole or not at all, and every failure is an error: the text goes to
// a temporary sibling that is written, fsynced and closed with every result checked, then
// renamed over `path`. A full disk, a read-only directory or a path that is a directory ends in
// InputError naming `path` and the reason, `path` is left as it was, and the temporary is gone.
#include <cstddef>
#include <string>

namespace sbp {

void write_file_atomically(const std::string& path, const std::string& text);

// Writes n bytes (or `text`) to an open descriptor until done; false (errno set) on any failed
// write. write(2) may accept less than asked, and is retried on EINTR.
bool write_all(int fd, const void* data, size_t n);
bool write_all(int fd, const std::string& text);

// strerror(errno) as a string, for messages.
std::string errno_message();

}  // namespace sbp
