#include "model/safetensors.h"

#include "core/untrusted_json.h"
#include "core/output_file.h"
#include "core/memory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "core/error.h"

namespace sbp {

namespace {
// Elements converted per piece when a tensor is read into, or written from, staging memory.
constexpr int64_t kStageElems = int64_t{1} << 20;
}  // namespace

// The format stores little-endian data and we copy it without byte swapping.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

// ordered_json keeps the header's order, so entries() lists tensors as the file does.
using ojson = nlohmann::ordered_json;

// Same cap as the reference implementation (MAX_HEADER_SIZE): a larger header is either
// corrupt or hostile, and we would otherwise allocate whatever the first 8 bytes claim.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Conversions over this many elements are split across OpenMP threads.
constexpr int64_t kParallelElems = int64_t{1} << 20;


// dtype spellings of the safetensors format that we recognise but do not read.
bool is_known_unsupported_dtype(const std::string& s) {
  static const char* const kNames[] = {"BOOL",    "U8",      "I8",      "I16",     "U16",    "I32",
                                       "U32",     "I64",     "U64",     "F64",     "C64",    "F4",
                                       "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2"};
  for (const char* n : kNames)
    if (s == n) return true;
  return false;
}

// A JSON value as a non-negative integer, or false (negative, fractional, bool, string, ...).
// nlohmann stores every non-negative integer literal as unsigned, so a signed one is < 0.
bool as_u64(const ojson& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

// ---- element conversion -------------------------------------------------------------------
// Sources may sit at any byte offset inside the mapping (the format does not promise
// alignment), so every load goes through memcpy, which compiles to a plain unaligned load.

inline uint16_t load_u16(const unsigned char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float load_f32(const unsigned char* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void store_u16(unsigned char* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void store_f32(unsigned char* p, float v) { std::memcpy(p, &v, 4); }

// f16_to_f32 is exact but not cheap; a 64K-entry table (256 KiB) makes large F16 tensors
// convert at memory speed. Built per call, so there is no shared mutable state.
std::vector<float> f16_table() {
  std::vector<float> t(65536);
  for (uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32(static_cast<uint16_t>(i));
  return t;
}

// Converts n elements from src (dtype s) to dst (dtype d). Supported: F32, BF16, F16 both ways.
void convert(const unsigned char* src, DType s, unsigned char* dst, DType d, int64_t n) {
  if (n <= 0) return;
  if (s == d) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(s));
    return;
  }
  std::vector<float> table;
  if (s == DType::F16 && n >= 4096) table = f16_table();
  const float* tab = table.empty() ? nullptr : table.data();
  auto load = [&](int64_t i) -> float {
    switch (s) {
      case DType::F32: return load_f32(src + 4 * i);
      case DType::BF16: return bf16_to_f32(load_u16(src + 2 * i));
      case DType::F16:
      case DType::I32: {  // not a supported source (above); on the F16 path as before
        const uint16_t h = load_u16(src + 2 * i);
        return tab ? tab[h] : f16_to_f32(h);
      }
    }
    return 0.0f;  // unreachable: every dtype is a case
  };
  // The two paths that matter for loading checkpoints get their own tight loops.
  if (s == DType::BF16 && d == DType::F32) {
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
    for (int64_t i = 0; i < n; ++i) store_f32(dst + 4 * i, bf16_to_f32(load_u16(src + 2 * i)));
    return;
  }
  if (s == DType::F32 && d == DType::BF16) {
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
    for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_bf16(load_f32(src + 4 * i)));
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    const float f = load(i);
    switch (d) {
      case DType::F32: store_f32(dst + 4 * i, f); break;
      case DType::BF16: store_u16(dst + 2 * i, f32_to_bf16(f)); break;
      case DType::F16:
      case DType::I32: store_u16(dst + 2 * i, f32_to_f16(f)); break;  // I32: as before
    }
  }
}

bool is_float_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

// Parses the header, rejecting duplicate keys in any object: nlohmann keeps the last value
// of a repeated key, which would silently hide a second tensor of the same name.
ojson parse_header(const char* begin, const char* end, const std::string& path) {
  std::vector<std::set<std::string>> seen;  // one key set per open object
  std::string top_key;                      // last key of the outermost object
  std::string duplicate;
  auto cb = [&](int depth, ojson::parse_event_t ev, ojson& parsed) -> bool {
    switch (ev) {
      case ojson::parse_event_t::object_start: seen.emplace_back(); break;
      case ojson::parse_event_t::object_end:
        if (!seen.empty()) seen.pop_back();
        break;
      case ojson::parse_event_t::key: {
        const std::string k = parsed.get<std::string>();
        if (depth == 1) top_key = k;
        if (!seen.empty() && !seen.back().insert(k).second && duplicate.empty()) {
          duplicate = depth == 1 ? "duplicate tensor name '" + k + "' in header"
                                 : "duplicate key '" + k + "' in header entry '" + top_key + "'";
        }
        break;
      }
      default: break;
    }
    return true;
  };
  ojson j;
  try {
    j = parse_untrusted_ordered_json(std::string_view(begin, end - begin), path, cb);
  } catch (const ojson::exception& e) {
    throw InputError(path + ": header is not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) throw InputError(path + ": " + duplicate);
  return j;
}

}  // namespace

// ---- reading ---------------------------------------------------------------------------------

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(path, {"safetensors file", 8, "safetensors header length"}) {
  parse_and_validate();
  // Weights are copied out front to back, once.
  file_.advise_sequential();
}

void SafetensorsFile::parse_and_validate() {
  const std::string& path = path_;
  const unsigned char* bytes = file_.bytes();
  const uint64_t file_size = file_.size();
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);  // little-endian u64 (static_assert above)
  if (n > kMaxHeaderBytes) {
    throw InputError(path + ": header size " + std::to_string(n) + " bytes exceeds the " +
                     std::to_string(kMaxHeaderBytes) + "-byte limit (corrupt file?)");
  }
  if (n > file_size - 8) {
    throw InputError(path + ": header size " + std::to_string(n) + " bytes is larger than the " +
                     std::to_string(file_size - 8) + " bytes after the length (truncated file?)");
  }
  const uint64_t data_size = file_size - 8 - n;
  data_ = bytes + 8 + n;

  const char* hb = reinterpret_cast<const char*>(bytes + 8);
  ojson header = parse_header(hb, hb + n, path);
  if (!header.is_object()) throw InputError(path + ": header must be a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const ojson& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw InputError(path + ": __metadata__ must be an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw InputError(path + ": __metadata__ value for '" + m.key() + "' must be a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "': ";
    if (!v.is_object()) throw InputError(where + "header entry must be an object");

    auto dt = v.find("dtype");
    if (dt == v.end()) throw InputError(where + "missing 'dtype'");
    if (!dt->is_string()) throw InputError(where + "'dtype' must be a string");
    const std::string dts = dt->get<std::string>();
    SafetensorsEntry e;
    e.name = name;
    if (dts == "F32") {
      e.dtype = DType::F32;
    } else if (dts == "BF16") {
      e.dtype = DType::BF16;
    } else if (dts == "F16") {
      e.dtype = DType::F16;
    } else if (is_known_unsupported_dtype(dts)) {
      throw InputError(where + "unsupported dtype '" + dts +
                       "' (this reader supports F32, BF16, F16)");
    } else {
      throw InputError(where + "unknown dtype '" + dts + "'");
    }

    auto sh = v.find("shape");
    if (sh == v.end()) throw InputError(where + "missing 'shape'");
    if (!sh->is_array()) throw InputError(where + "'shape' must be an array");
    if (sh->size() > static_cast<size_t>(Shape::kMaxDims)) {
      throw InputError(where + "rank " + std::to_string(sh->size()) +
                       " is not supported (at most " + std::to_string(Shape::kMaxDims) + ")");
    }
    // numel and byte length with overflow checks: an attacker controls every number here.
    uint64_t numel = 1;
    Shape shape;
    for (const ojson& d : *sh) {
      uint64_t dim = 0;
      if (!as_u64(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
        throw InputError(where + "shape entries must be non-negative integers, got " + sh->dump());
      }
      if (__builtin_mul_overflow(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX))
        throw InputError(where + "shape " + sh->dump() + " overflows the element count");
      shape.dims[static_cast<size_t>(shape.ndim++)] = static_cast<int64_t>(dim);
    }
    if (shape.ndim == 0) shape = Shape{1};  // a scalar: one element
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes))
      throw InputError(where + "shape " + sh->dump() + " overflows the byte size");
    e.shape = shape;

    auto off = v.find("data_offsets");
    if (off == v.end()) throw InputError(where + "missing 'data_offsets'");
    if (!off->is_array() || off->size() != 2 || !as_u64((*off)[0], &e.begin) ||
        !as_u64((*off)[1], &e.end)) {
      throw InputError(where + "'data_offsets' must be two non-negative integers, got " +
                       off->dump());
    }
    if (e.begin > e.end) {
      throw InputError(where + "data_offsets begin " + std::to_string(e.begin) + " is after end " +
                       std::to_string(e.end));
    }
    if (e.end > data_size) {
      throw InputError(where + "data_offsets end " + std::to_string(e.end) +
                       " is beyond the data region of " + std::to_string(data_size) +
                       " bytes (truncated file?)");
    }
    if (e.end - e.begin != nbytes) {
      throw InputError(where + "data_offsets cover " + std::to_string(e.end - e.begin) +
                       " bytes but dtype " + dts + " and shape " + sh->dump() + " need " +
                       std::to_string(nbytes) + " bytes (length mismatch)");
    }
    index_[name] = entries_.size();
    entries_.push_back(std::move(e));
  }

  // The ranges must tile the data region exactly, as the reference reader demands: an
  // overlap would alias two tensors, a hole or trailing bytes means the header lies.
  std::vector<const SafetensorsEntry*> by_offset;
  by_offset.reserve(entries_.size());
  for (const auto& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;  // bytes [0, covered) are claimed
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < covered) {
      throw InputError(path + ": tensor '" + e->name + "' data_offsets [" +
                       std::to_string(e->begin) + ", " + std::to_string(e->end) +
                       ") overlap tensor '" + prev->name + "' [" + std::to_string(prev->begin) +
                       ", " + std::to_string(prev->end) + ")");
    }
    if (e->begin > covered) {
      throw InputError(path + ": hole in the data region: bytes [" + std::to_string(covered) +
                       ", " + std::to_string(e->begin) + ") belong to no tensor (before tensor '" +
                       e->name + "')");
    }
    covered = e->end;
    prev = e;
  }
  if (covered != data_size) {
    throw InputError(path + ": hole in the data region: bytes [" + std::to_string(covered) + ", " +
                     std::to_string(data_size) + ") at the end belong to no tensor");
  }
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsFile::entry_or_throw(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) throw InputError(path_ + ": no tensor named '" + name + "'");
  return *e;
}

void SafetensorsFile::read_into(const std::string& name, const Tensor& dst) const {
  const SafetensorsEntry& e = entry_or_throw(name);
  if (dst.numel() != e.shape.numel()) {
    throw InputError(path_ + ": tensor '" + name + "' has shape " + e.shape.str() + " (" +
                     std::to_string(e.shape.numel()) + " elements), destination " + dst.describe() +
                     " has " + std::to_string(dst.numel()));
  }
  read_range_into(name, 0, dst);
}

void SafetensorsFile::read_range_into(const std::string& name, int64_t first,
                                      const Tensor& dst) const {
  const SafetensorsEntry& e = entry_or_throw(name);
  SBP_CHECK(is_float_dtype(dst.dtype),
            "safetensors: cannot convert into " + std::string(dtype_name(dst.dtype)));
  SBP_CHECK(dst.data != nullptr || dst.numel() == 0, "safetensors: destination has no data");
  const int64_t total = e.shape.numel();
  SBP_CHECK(first >= 0 && first <= total && dst.numel() <= total - first,
            "safetensors: range of " + std::to_string(dst.numel()) + " elements at " +
                std::to_string(first) + " outside tensor '" + name + "' " + e.shape.str());
  const unsigned char* src = data_ + e.begin + static_cast<uint64_t>(first) * dtype_size(e.dtype);
  if (!dst.memory) {  // host memory: convert straight into it
    convert(src, e.dtype, static_cast<unsigned char*>(dst.data), dst.dtype, dst.numel());
    return;
  }
  // A backend's memory: convert through a bounded host buffer, one upload per piece.
  const Tensor flat = dst.reshaped({dst.numel()});
  std::vector<unsigned char> stage;
  for_row_blocks(flat, kStageElems, [&](int64_t i0, int64_t i1) {
    stage.resize(static_cast<size_t>(i1 - i0) * dtype_size(dst.dtype));
    convert(src + static_cast<size_t>(i0) * dtype_size(e.dtype), e.dtype, stage.data(), dst.dtype,
            i1 - i0);
    dst.memory->upload(flat.slice_rows(i0, i1), stage.data());
  });
}

// ---- writing ---------------------------------------------------------------------------------

void fsync_directory(const std::string& dir) {
  // Makes a rename inside `dir` durable. Some file systems refuse fsync on directories
  // (EINVAL); the rename itself already happened, so that is not an error.
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata) {
  if (!is_float_dtype(dtype))
    throw InputError(path + ": cannot write dtype " + std::string(dtype_name(dtype)));
  // Header: __metadata__ first (as the reference writes it), then tensors in the given order
  // with contiguous offsets.
  ojson header = ojson::object();
  ojson meta = ojson::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  std::set<std::string> names;
  int64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw InputError(path + ": invalid tensor name '" + t.name + "'");
    if (!names.insert(t.name).second)
      throw InputError(path + ": tensor '" + t.name + "' given twice");
    SBP_CHECK(t.tensor.defined() && is_float_dtype(t.tensor.dtype) &&
                  (t.tensor.data != nullptr || t.tensor.numel() == 0),
              "write_safetensors: tensor '" + t.name + "' is " + t.tensor.describe() +
                  (t.tensor.data ? "" : " without data"));
    // The file's dtype may be wider than the tensor's, and offsets add up over every tensor.
    const int64_t nbytes = checked_mul(t.tensor.numel(), static_cast<int64_t>(dtype_size(dtype)),
                                       "the bytes of tensor '" + t.name + "'");
    const int64_t end = checked_add(offset, nbytes, "the data region of " + path);
    ojson shape = ojson::array();
    for (int i = 0; i < t.tensor.shape.ndim; ++i) shape.push_back(t.tensor.shape[i]);
    header[t.name] = {
        {"dtype", dtype_name(dtype)}, {"shape", shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string hs = header.dump();
  // Pad with spaces so the data region starts 8-byte aligned (8 + N is a multiple of 8).
  hs.append((8 - hs.size() % 8) % 8, ' ');
  const uint64_t n = hs.size();

  // Through OutputFile (core/output_file.h): a --grads path that is a symlink or a device is
  // written by its one rule, never replaced.
  OutputFile out(path);
  out.write(&n, 8);
  out.write(hs.data(), hs.size());
  // Convert through bounded staging buffers so writing never doubles the memory use; a
  // backend's tensors are downloaded a piece at a time.
  std::vector<unsigned char> raw, stage;
  for (const NamedTensor& t : tensors) {
    const Tensor flat = t.tensor.reshaped({t.tensor.numel()});
    for_row_blocks(flat, kStageElems, [&](int64_t i0, int64_t i1) {
      const Tensor piece = flat.slice_rows(i0, i1);
      const unsigned char* src = static_cast<const unsigned char*>(piece.data);
      if (piece.memory) {
        raw.resize(piece.nbytes());
        piece.memory->download(raw.data(), piece);
        src = raw.data();
      }
      if (piece.dtype == dtype) {
        out.write(src, piece.nbytes());
        return;
      }
      stage.resize(static_cast<size_t>(i1 - i0) * dtype_size(dtype));
      convert(src, piece.dtype, stage.data(), dtype, i1 - i0);
      out.write(stage.data(), stage.size());
    });
  }
  out.commit();
}

}  // namespace sbp
