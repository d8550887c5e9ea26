#pragma once
// Every file streambp writes at a path the user named goes through OutputFile: the one place
// that decides how a path is written.
//
// The rule, by what the path is (followed through symlinks, never replacing one):
//  - absent, or a regular file: written whole or not at all. The bytes go to a temporary
//    sibling that is written, fsynced and closed with every result checked, then renamed over
//    the file. A full disk, a read-only directory or any failure ends in InputError naming the
//    path and the reason, the file is left as it was, and the temporary is gone.
//  - a symlink: never replaced. One that leads to a regular file is written through to that
//    file (the rename happens beside the file it points to, so the link stays a link and the
//    file is still replaced whole); one that leads to a character device or FIFO is written
//    through like one (`--output /dev/stdout` is itself a link); a dangling link or one that
//    leads anywhere else is refused: creating a file at a link's target writes where the user
//    did not name.
//  - a character device or FIFO (/dev/stdout, /dev/null, a pipe to another program): opened and
//    written through, no temporary, no rename. Renaming a file over it would replace the
//    device node itself (as root, `--output /dev/stdout` used to replace /dev/stdout); a stream
//    cannot be written "whole or not at all", so a failure part way (ENOSPC on /dev/full, a
//    reader that went away) is still an InputError naming the path, after what was written.
//  - anything else (a directory, a block device, a socket): refused with one line naming the
//    path and what it is.
#include <cstddef>
#include <string>

namespace sbp {

// How a path will be written, or InputError(path + ": ...") if it may not be. No file is
// created: commands call this before their work, so that a refusal comes before minutes of it.
struct OutputTarget {
  enum Kind { replace, stream } kind;
  std::string file;  // replace: the file renamed over (a symlink's target); stream: `path`
};
OutputTarget output_target(const std::string& path);

// An output the run places inside a directory it owns (`dir`, output_dir), named by `key` for
// messages: no part of the path below `dir` may be a symlink, since a link there would send
// the write (or overwrite_output_dir's truncation) outside `dir`; then output_target's rule.
// Compared as written (absolute, `..` folded), not resolved: a path that is not below `dir`
// (an output given elsewhere explicitly) gets output_target's rule alone.
OutputTarget output_target_in(const std::string& key, const std::string& path,
                              const std::string& dir);

// One output file. Construction applies output_target() and opens the temporary (or the
// stream); write() appends; commit() publishes. Destroyed without commit(): the temporary is
// removed and the target is as it was (a stream keeps what was written).
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t n);  // InputError naming the path on failure
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();

 private:
  std::string path_;  // as the user named it, for messages
  OutputTarget target_;
  std::string tmp_;  // replace: the temporary sibling of target_.file
  int fd_ = -1;
  bool committed_ = false;
};

// OutputFile(path).write(text).commit().
void write_file_atomically(const std::string& path, const std::string& text);

// Writes n bytes (or `text`) to an open descriptor until done; false (errno set) on any failed
// write. write(2) may accept less than asked, and is retried on EINTR.
bool write_all(int fd, const void* data, size_t n);
bool write_all(int fd, const std::string& text);

// strerror(errno) as a string, for messages.
std::string errno_message();

}  // namespace sbp
