#pragma once
// safetensors reading and writing (https://github.com/huggingface/safetensors format):
//   8-byte little-endian header length N, N bytes of JSON header, then the data region.
// Files are untrusted: the header is validated completely (size, JSON, dtypes, shapes,
// offsets inside the data region, no overlaps, no holes) before any tensor is used.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace sbp {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;         // a 0-d (scalar) tensor is stored as shape (1)
  uint64_t begin = 0;  // byte offsets relative to the start of the data region
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Opens and validates; throws InputError naming the file and the problem.
  explicit SafetensorsFile(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;  // null if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copies tensor `name` into dst (same numel), converting F32/BF16/F16 to dst's dtype
  // (F32, BF16 or F16). Throws InputError if absent or the element count differs.
  void read_into(const std::string& name, const Tensor& dst) const;
  // Copies dst.numel() elements of tensor `name`, starting at flat element `first`, into dst
  // (converting as read_into does). Lets callers stream a large tensor in bounded pieces.
  void read_range_into(const std::string& name, int64_t first, const Tensor& dst) const;
  // The stored bytes of `e` (one of entries()), as mapped: for digests of what a rank loads.
  const unsigned char* raw_bytes(const SafetensorsEntry& e) const { return data_ + e.begin; }

 private:
  void parse_and_validate();  // throws InputError; called once by the constructor
  const SafetensorsEntry& entry_or_throw(const std::string& name) const;

  std::string path_;
  MappedFile file_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* data_ = nullptr;  // start of the data region (inside the mapping)
};

struct NamedTensor {
  std::string name;
  Tensor tensor;  // F32 (or BF16) source data
};

// Writes tensors in the given order, converted to `dtype` (F32, BF16 or F16), through
// OutputFile (core/output_file.h): a new or regular file is written under a temporary name in
// the same directory and renamed; a symlink or device follows that file's one rule.
// The header's __metadata__ is {"format": "pt"} plus `metadata`. On any error the temporary
// file is removed and `path` is left as it was.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata = {});

// fsync of a directory, so that a rename inside it survives a crash (best effort).
void fsync_directory(const std::string& dir);

}  // namespace sbp
