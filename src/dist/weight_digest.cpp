#include "dist/weight_digest.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "model/safetensors.h"

namespace sbp {

namespace {

constexpr uint64_t kP1 = 11400714785074694791ull, kP2 = 14029467366897019727ull,
                   kP3 = 1609587929392839161ull, kP4 = 9650029242287828579ull,
                   kP5 = 2870177450012600261ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (the whole engine assumes it)
}
uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t round64(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }
uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * kP1 + kP4; }

// A read-only mapping of a whole file, unmapped on scope exit.
struct Mapping {
  const unsigned char* bytes = nullptr;
  size_t size = 0;
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (m != MAP_FAILED) {
        bytes = static_cast<const unsigned char*>(m);
        size = static_cast<size_t>(st.st_size);
        ::madvise(m, size, MADV_SEQUENTIAL);
      }
    }
    ::close(fd);
  }
  ~Mapping() {
    if (bytes) ::munmap(const_cast<unsigned char*>(bytes), size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

}  // namespace

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (const unsigned char* limit = end - 32; p <= limit; p += 32) {
      v1 = round64(v1, read64(p));
      v2 = round64(v2, read64(p + 8));
      v3 = round64(v3, read64(p + 16));
      v4 = round64(v4, read64(p + 24));
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(merge(merge(merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(n);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round64(0, read64(p)), 27) * kP1 + kP4;
  if (p + 4 <= end) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

void append_tensor_digests(std::vector<AgreedSetting>& out, const std::string& key,
                           const std::string& path) {
  // The loader's own validation: offsets inside the data region, no overlaps. A file it refuses
  // is recorded as refused (every rank with it then fails alike when the run loads it).
  std::vector<SafetensorsEntry> entries;
  try {
    entries = SafetensorsFile(path).entries();
  } catch (const Error&) {
    out.push_back({key + ": (tensors)", "not valid safetensors"});
    return;
  }
  const Mapping map(path);
  uint64_t header = 0;
  if (map.size >= 8) std::memcpy(&header, map.bytes, 8);
  if (!map.bytes || header > map.size - 8) {
    out.push_back({key + ": (tensors)", "unreadable"});
    return;
  }
  const unsigned char* data = map.bytes + 8 + header;
  // Validated by SafetensorsFile above: every [begin, end) lies inside the data region, unless
  // the file changed since (then it is recorded so rather than read past its end).
  for (const SafetensorsEntry& e : entries) {
    if (e.end > map.size - 8 - header) {
      out.push_back({key + ": (tensors)", "changed while read"});
      return;
    }
  }
  std::vector<uint64_t> digests(entries.size());
  const int64_t count = static_cast<int64_t>(entries.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < count; ++i) {
    const SafetensorsEntry& e = entries[static_cast<size_t>(i)];
    digests[static_cast<size_t>(i)] = xxh64(data + e.begin, e.end - e.begin);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    out.push_back({key + ": " + e.name, std::string(dtype_name(e.dtype)) + " " + e.shape.str() +
                                            " xxh64 " + hex_digest(digests[i])});
  }
}

}  // namespace sbp
