#pragma once
// A regular file mapped read-only, for the readers of untrusted binary formats (safetensors,
// GGUF): they validate every offset against size() before they read, and copy out what they
// keep, so the pages are read lazily and only once. The mapping outlives the descriptor.
#include <cstdint>
#include <string>

namespace sbp {

// What a reader calls its format in the mapping's errors, and the size below which a file
// cannot hold its fixed header (nothing is mapped then: a zero-length mapping fails).
struct MappedFormat {
  const char* file;      // "GGUF file": "<path>: cannot open GGUF file: <why>"
  uint64_t min_bytes;    // 24
  const char* min_what;  // "GGUF header": "<path>: file is 3 bytes, shorter than the 24-byte
                         // GGUF header"
};

class MappedFile {
 public:
  // Opens and maps `path` (core/input_file.h's check first); InputError naming the path when
  // it cannot be opened, stated or mapped, is not a regular file, or is shorter than
  // format.min_bytes.
  MappedFile(const std::string& path, const MappedFormat& format);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* bytes() const { return bytes_; }
  uint64_t size() const { return size_; }
  // The caller will read the pages front to back, once (madvise MADV_SEQUENTIAL).
  void advise_sequential() const;

 private:
  const unsigned char* bytes_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace sbp
