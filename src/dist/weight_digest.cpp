#include "dist/weight_digest.h"

#include <cstdint>
#include <memory>

// The reference implementation, compiled into this file (Debian's libxxhash-dev): no library
// to link, so the program and the wheels carry no new dependency.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "model/safetensors.h"

namespace sbp {

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  return static_cast<uint64_t>(XXH64(data, n, static_cast<XXH64_hash_t>(seed)));
}

void append_tensor_digests(std::vector<AgreedSetting>& out, const std::string& key,
                           const std::string& path) {
  // The loader's own validation: offsets inside the data region, no overlaps. A file it refuses
  // is recorded as refused (every rank with it then fails alike when the run loads it).
  std::unique_ptr<SafetensorsFile> file;
  try {
    file = std::make_unique<SafetensorsFile>(path);
  } catch (const Error&) {
    out.push_back({key + ": (tensors)", "not valid safetensors"});
    return;
  }
  // Validated by SafetensorsFile: every [begin, end) lies inside its mapping's data region.
  const std::vector<SafetensorsEntry>& entries = file->entries();
  std::vector<uint64_t> digests(entries.size());
  const int64_t count = static_cast<int64_t>(entries.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    const SafetensorsEntry& e = entries[static_cast<size_t>(i)];
    digests[static_cast<size_t>(i)] = xxh64(file->raw_bytes(e), e.end - e.begin);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    out.push_back({key + ": " + e.name, std::string(dtype_name(e.dtype)) + " " + e.shape.str() +
                                            " xxh64 " + hex_digest(digests[i])});
  }
}

}  // namespace sbp
