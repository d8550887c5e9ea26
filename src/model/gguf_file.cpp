#include "model/gguf_file.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/output_file.h"

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes little-endian");

namespace sbp {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;               // GGML_MAX_DIMS
constexpr size_t kMaxTensorName = 256;
constexpr uint64_t kDefaultAlignment = 32;

// Bytes of one element of a scalar value type (0 for STRING and ARRAY, which vary).
size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    default: return 0;
  }
}

bool known_value_type(uint32_t t) { return t <= 12; }

// Keys and tensor names are ASCII identifiers in every file llama.cpp writes; a control
// character would also break the one-line error messages that quote them.
bool has_control_char(const std::string& s) {
  for (unsigned char ch : s)
    if (ch < 0x20 || ch == 0x7f) return true;
  return false;
}

// A bounded reader over the mapped header: every read checks the bytes left first.
struct Cursor {
  const unsigned char* p;
  uint64_t pos = 0;
  uint64_t size;
  const std::string& path;

  uint64_t left() const { return size - pos; }
  void need(uint64_t n, const std::string& what) const {
    if (n > left()) {
      throw InputError(path + ": " + what + " needs " + std::to_string(n) + " bytes at offset " +
                       std::to_string(pos) + " but the file has " + std::to_string(left()) +
                       " left (truncated file?)");
    }
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + " length");
    need(n, what + " (" + std::to_string(n) + "-byte string)");
    std::string s(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(n));
    pos += n;
    return s;
  }
};

// A scalar of type t as GgufValue (integers and bools in i, floats in f).
void read_scalar(Cursor& c, GgufValueType t, GgufValue& v, const std::string& what) {
  switch (t) {
    case GgufValueType::U8: v.i = c.read<uint8_t>(what); break;
    case GgufValueType::I8: v.i = c.read<int8_t>(what); break;
    case GgufValueType::U16: v.i = c.read<uint16_t>(what); break;
    case GgufValueType::I16: v.i = c.read<int16_t>(what); break;
    case GgufValueType::U32: v.i = c.read<uint32_t>(what); break;
    case GgufValueType::I32: v.i = c.read<int32_t>(what); break;
    case GgufValueType::I64: v.i = c.read<int64_t>(what); break;
    case GgufValueType::U64: {
      const uint64_t u = c.read<uint64_t>(what);
      if (u > static_cast<uint64_t>(INT64_MAX))
        throw InputError(c.path + ": " + what + ": u64 value " + std::to_string(u) +
                         " is larger than this reader accepts (2^63 - 1)");
      v.i = static_cast<int64_t>(u);
      break;
    }
    case GgufValueType::F32: v.f = c.read<float>(what); break;
    case GgufValueType::F64: v.f = c.read<double>(what); break;
    case GgufValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>(what);
      if (b > 1)
        throw InputError(c.path + ": " + what + ": bool value " + std::to_string(b) +
                         " is neither 0 nor 1");
      v.i = b;
      break;
    }
    case GgufValueType::STRING: v.s = c.str(what); break;
    case GgufValueType::ARRAY: break;  // handled by the caller
  }
}

GgufValue read_value(Cursor& c, const std::string& key) {
  const std::string what = "metadata '" + key + "'";
  const uint32_t t = c.read<uint32_t>(what + " value type");
  if (!known_value_type(t))
    throw InputError(c.path + ": " + what + ": unknown value type " + std::to_string(t));
  GgufValue v;
  v.type = static_cast<GgufValueType>(t);
  if (v.type != GgufValueType::ARRAY) {
    read_scalar(c, v.type, v, what);
    return v;
  }
  const uint32_t et = c.read<uint32_t>(what + " array element type");
  if (!known_value_type(et))
    throw InputError(c.path + ": " + what + ": unknown array element type " + std::to_string(et));
  v.elem_type = static_cast<GgufValueType>(et);
  if (v.elem_type == GgufValueType::ARRAY)
    throw InputError(c.path + ": " + what + ": arrays of arrays are not supported");
  const uint64_t n = c.read<uint64_t>(what + " array length");
  // Each element takes at least its scalar size (a string at least its 8-byte length): a count
  // past what the bytes left could hold is a lie, refused before anything is reserved.
  const uint64_t min_elem = v.elem_type == GgufValueType::STRING ? 8 : scalar_size(v.elem_type);
  if (n > c.left() / min_elem)
    throw InputError(c.path + ": " + what + ": array length " + std::to_string(n) +
                     " does not fit in the " + std::to_string(c.left()) + " bytes left");
  const std::string ew = what + " array element";
  if (v.elem_type == GgufValueType::STRING) {
    v.strs.reserve(static_cast<size_t>(n));
    for (uint64_t k = 0; k < n; ++k) v.strs.push_back(c.str(ew));
  } else if (v.elem_type == GgufValueType::F32 || v.elem_type == GgufValueType::F64) {
    v.floats.reserve(static_cast<size_t>(n));
    GgufValue e;
    for (uint64_t k = 0; k < n; ++k) {
      read_scalar(c, v.elem_type, e, ew);
      v.floats.push_back(e.f);
    }
  } else {
    v.ints.reserve(static_cast<size_t>(n));
    GgufValue e;
    for (uint64_t k = 0; k < n; ++k) {
      read_scalar(c, v.elem_type, e, ew);
      v.ints.push_back(e.i);
    }
  }
  return v;
}

// The index of the first NaN or infinite value of x[0, n), or -1. The common case (all finite)
// is a branch-free reduction the compiler vectorises; the search for the index runs only after.
int64_t first_non_finite(const float* x, int64_t n) {
  uint32_t worst = 0;  // an exponent field of all ones marks inf and NaN
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    worst |= ~u & 0x7f800000u ? 0u : 1u;
  }
  if (!worst) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

uint64_t round_up(uint64_t x, uint64_t a, const std::string& what) {
  const uint64_t r = (a - x % a) % a;
  uint64_t out = 0;
  if (__builtin_add_overflow(x, r, &out)) throw_size_overflow(what, std::to_string(x) + " + pad");
  return out;
}

}  // namespace

// ---- values ----------------------------------------------------------------------------------

const char* gguf_value_type_name(GgufValueType t) {
  static const char* const kNames[] = {"u8",  "i8",  "u16",   "i16",   "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? kNames[i] : "unknown";
}

GgufValue GgufValue::u32(uint32_t v) { GgufValue x; x.type = GgufValueType::U32; x.i = v; return x; }
GgufValue GgufValue::i32(int32_t v) { GgufValue x; x.type = GgufValueType::I32; x.i = v; return x; }
GgufValue GgufValue::u64(uint64_t v) {
  GgufValue x;
  x.type = GgufValueType::U64;
  x.i = static_cast<int64_t>(v);
  return x;
}
GgufValue GgufValue::f32(float v) { GgufValue x; x.type = GgufValueType::F32; x.f = v; return x; }
GgufValue GgufValue::boolean(bool v) { GgufValue x; x.type = GgufValueType::BOOL; x.i = v; return x; }
GgufValue GgufValue::str(std::string v) {
  GgufValue x;
  x.type = GgufValueType::STRING;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::str_array(std::vector<std::string> v) {
  GgufValue x;
  x.type = GgufValueType::ARRAY;
  x.elem_type = GgufValueType::STRING;
  x.strs = std::move(v);
  return x;
}
GgufValue GgufValue::f32_array(std::vector<double> v) {
  GgufValue x;
  x.type = GgufValueType::ARRAY;
  x.elem_type = GgufValueType::F32;
  x.floats = std::move(v);
  return x;
}
GgufValue GgufValue::i32_array(std::vector<int64_t> v) {
  GgufValue x;
  x.type = GgufValueType::ARRAY;
  x.elem_type = GgufValueType::I32;
  x.ints = std::move(v);
  return x;
}

bool GgufValue::is_integer() const {
  return type != GgufValueType::BOOL && type != GgufValueType::STRING &&
         type != GgufValueType::ARRAY && !is_float();
}
bool GgufValue::is_float() const {
  return type == GgufValueType::F32 || type == GgufValueType::F64;
}
size_t GgufValue::array_size() const {
  return elem_type == GgufValueType::STRING ? strs.size()
         : (elem_type == GgufValueType::F32 || elem_type == GgufValueType::F64) ? floats.size()
                                                                                  : ints.size();
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // validated not to overflow on reading
  return n;
}
std::vector<int64_t> GgufTensorInfo::hf_shape() const {
  return std::vector<int64_t>(ne.rbegin(), ne.rend());
}

// ---- reading ---------------------------------------------------------------------------------

GgufFile::GgufFile(const std::string& path)
    : path_(path), file_(path, {"GGUF file", 24, "GGUF header"}) {
  parse();
}

void GgufFile::parse() {
  const std::string& path = path_;
  const uint64_t file_size = file_.size();
  Cursor c{file_.bytes(), 0, file_size, path_};
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) throw InputError(path + ": not a GGUF file (magic is not \"GGUF\")");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    throw InputError(path + ": GGUF version " + std::to_string(version_) +
                     " is not supported (versions 2 and 3 are)");
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info at least
  // 8 + 4 + 8 + 4 + 8: counts beyond that are lies, refused before anything is reserved.
  if (n_kv > c.left() / 13)
    throw InputError(path + ": metadata count " + std::to_string(n_kv) +
                     " does not fit in the file");
  if (n_tensors > c.left() / 32)
    throw InputError(path + ": tensor count " + std::to_string(n_tensors) +
                     " does not fit in the file");

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.str("metadata key " + std::to_string(k));
    if (key.empty()) throw InputError(path + ": metadata key " + std::to_string(k) + " is empty");
    if (has_control_char(key))
      throw InputError(path + ": metadata key " + std::to_string(k) +
                       " contains control characters");
    if (kv_index_.count(key)) throw InputError(path + ": duplicate metadata key '" + key + "'");
    GgufValue v = read_value(c, key);
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufValueType::U32)
      throw InputError(path + ": metadata 'general.alignment' must be u32, not " +
                       gguf_value_type_name(a->type));
    const uint64_t al = static_cast<uint64_t>(a->i);
    if (al == 0 || (al & (al - 1)) != 0)
      throw InputError(path + ": metadata 'general.alignment' is " + std::to_string(al) +
                       ", not a power of two");
    alignment_ = al;
  } else {
    alignment_ = kDefaultAlignment;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.str("tensor " + std::to_string(k) + " name");
    if (t.name.empty() || t.name.size() > kMaxTensorName)
      throw InputError(path + ": tensor " + std::to_string(k) + " name has " +
                       std::to_string(t.name.size()) + " bytes (1 to " +
                       std::to_string(kMaxTensorName) + " allowed)");
    if (has_control_char(t.name))
      throw InputError(path + ": tensor " + std::to_string(k) + " name contains control characters");
    if (tensor_index_.count(t.name))
      throw InputError(path + ": duplicate tensor name '" + t.name + "'");
    const std::string where = path + ": tensor '" + t.name + "': ";
    const uint32_t nd = c.read<uint32_t>("tensor '" + t.name + "' n_dims");
    if (nd < 1 || nd > kMaxDims)
      throw InputError(where + "n_dims " + std::to_string(nd) + " (1 to 4 allowed)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t ne = c.read<uint64_t>("tensor '" + t.name + "' ne[" + std::to_string(d) + "]");
      if (ne < 1 || ne > static_cast<uint64_t>(INT64_MAX))
        throw InputError(where + "ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                         " (must be at least 1)");
      if (__builtin_mul_overflow(numel, static_cast<int64_t>(ne), &numel))
        throw InputError(where + "shape overflows the element count");
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    t.type = c.read<uint32_t>("tensor '" + t.name + "' type");
    const auto info = ggml_type_info(t.type);
    if (!info) throw InputError(where + "unknown ggml type " + std::to_string(t.type));
    if (t.ne[0] % info->block_elems != 0)
      throw InputError(where + "row length ne[0] = " + std::to_string(t.ne[0]) +
                       " is not a multiple of the " + info->name + " block size " +
                       std::to_string(info->block_elems));
    const int64_t blocks = numel / info->block_elems;
    int64_t nbytes = 0;
    if (__builtin_mul_overflow(blocks, info->block_bytes, &nbytes))
      throw InputError(where + "byte size overflows");
    t.nbytes = static_cast<uint64_t>(nbytes);
    t.offset = c.read<uint64_t>("tensor '" + t.name + "' offset");
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  // The data region starts at the end of the tensor infos rounded up to the alignment.
  const uint64_t data_start = round_up(c.pos, alignment_, "the data region start");
  if (data_start > file_size)
    throw InputError(path + ": data region starts at byte " + std::to_string(data_start) +
                     ", past the end of the " + std::to_string(file_size) + "-byte file");
  const uint64_t data_size = file_size - data_start;
  data_ = file_.bytes() + data_start;
  // As llama.cpp lays tensors out (and checks them): in order, each at the previous one's end
  // rounded up to the alignment. This also rules out overlaps and misaligned offsets.
  uint64_t expected = 0, last_end = 0;
  for (const GgufTensorInfo& t : tensors_) {
    const std::string where = path + ": tensor '" + t.name + "': ";
    if (t.offset != expected)
      throw InputError(where + "offset " + std::to_string(t.offset) + ", expected " +
                       std::to_string(expected) + " (tensors must follow each other, each " +
                       std::to_string(alignment_) + "-byte aligned)");
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, t.nbytes, &end) || end > data_size)
      throw InputError(where + std::to_string(t.nbytes) + " bytes at offset " +
                       std::to_string(t.offset) + " run past the " + std::to_string(data_size) +
                       "-byte data region (truncated file?)");
    expected = round_up(end, alignment_, "tensor offsets");
    last_end = end;
  }
  // Every byte accounted for: the regions must tile the data section up to the alignment padding
  // after the last one (writers pad it or not). Bytes left over mean the header lies: a tensor
  // count one too low shifted every tensor 64 bytes early and dropped output.weight unseen.
  if (data_size != last_end && data_size != expected)
    throw InputError(path + ": data region bytes [" + std::to_string(last_end) + ", " +
                     std::to_string(data_size) + ") belong to no tensor (the tensor count " +
                     std::to_string(tensors_.size()) + " does not account for the whole file)");
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer())
    throw InputError(path_ + ": metadata '" + key + "' must be an integer, not " +
                     gguf_value_type_name(v->type));
  return v->i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  throw InputError(path_ + ": metadata '" + key + "' must be a number, not " +
                   gguf_value_type_name(v->type));
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::STRING)
    throw InputError(path_ + ": metadata '" + key + "' must be a string, not " +
                     gguf_value_type_name(v->type));
  return v->s;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL)
    throw InputError(path_ + ": metadata '" + key + "' must be a bool, not " +
                     gguf_value_type_name(v->type));
  return v->i != 0;
}

int64_t GgufFile::require_int(const std::string& key) const {
  const auto v = get_int(key);
  if (!v) throw InputError(path_ + ": metadata '" + key + "' is missing");
  return *v;
}

std::string GgufFile::require_string(const std::string& key) const {
  const auto v = get_string(key);
  if (!v) throw InputError(path_ + ": metadata '" + key + "' is missing");
  return *v;
}

void GgufFile::dequantize_into(const GgufTensorInfo& t, float* dst) const {
  const auto info = ggml_type_info(t.type);
  if (!info || !info->readable)
    throw InputError(path_ + ": tensor '" + t.name + "': type " + ggml_type_name(t.type) +
                     " is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K are)");
  const int64_t n = t.numel();
  dequantize(static_cast<GgmlType>(t.type), data(t), dst, n);
  // Every value becomes a weight: a NaN or inf would convert into a model every other command
  // refuses. One pass over what was just written (hot in cache), no copy.
  const int64_t bad = first_non_finite(dst, n);
  if (bad < 0) return;
  std::string where = "element " + std::to_string(bad);
  if (info->block_elems > 1)
    where += " (" + std::string(info->name) + " block " + std::to_string(bad / info->block_elems) +
             ": its scale or values)";
  throw InputError(path_ + ": tensor '" + t.name + "': " + where + " is " +
                   (std::isnan(dst[bad]) ? "nan" : "infinite") + " (weights must be finite)");
}

// ---- writing ---------------------------------------------------------------------------------

namespace {

struct Bytes {
  std::string b;
  template <class T>
  void put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
  }
};

void put_scalar(Bytes& o, GgufValueType t, int64_t i, double f, const std::string& s) {
  switch (t) {
    case GgufValueType::U8: o.put<uint8_t>(static_cast<uint8_t>(i)); break;
    case GgufValueType::I8: o.put<int8_t>(static_cast<int8_t>(i)); break;
    case GgufValueType::U16: o.put<uint16_t>(static_cast<uint16_t>(i)); break;
    case GgufValueType::I16: o.put<int16_t>(static_cast<int16_t>(i)); break;
    case GgufValueType::U32: o.put<uint32_t>(static_cast<uint32_t>(i)); break;
    case GgufValueType::I32: o.put<int32_t>(static_cast<int32_t>(i)); break;
    case GgufValueType::U64: o.put<uint64_t>(static_cast<uint64_t>(i)); break;
    case GgufValueType::I64: o.put<int64_t>(i); break;
    case GgufValueType::F32: o.put<float>(static_cast<float>(f)); break;
    case GgufValueType::F64: o.put<double>(f); break;
    case GgufValueType::BOOL: o.put<uint8_t>(i ? 1 : 0); break;
    case GgufValueType::STRING: o.str(s); break;
    case GgufValueType::ARRAY: SBP_CHECK(false, "write_gguf: nested array");
  }
}

}  // namespace

void write_gguf(const std::string& path,
                const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorOut>& tensors) {
  Bytes h;
  h.put<uint32_t>(kMagic);
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors.size());
  h.put<uint64_t>(metadata.size());
  std::map<std::string, int> keys;
  for (const auto& [k, v] : metadata) {
    SBP_CHECK(keys.emplace(k, 0).second, "write_gguf: metadata key '" + k + "' given twice");
    h.str(k);
    h.put<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.type != GgufValueType::ARRAY) {
      put_scalar(h, v.type, v.i, v.f, v.s);
      continue;
    }
    h.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
    h.put<uint64_t>(v.array_size());
    for (size_t e = 0; e < v.array_size(); ++e) {
      if (v.elem_type == GgufValueType::STRING) put_scalar(h, v.elem_type, 0, 0, v.strs[e]);
      else if (v.elem_type == GgufValueType::F32 || v.elem_type == GgufValueType::F64)
        put_scalar(h, v.elem_type, 0, v.floats[e], {});
      else put_scalar(h, v.elem_type, v.ints[e], 0, {});
    }
  }
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const GgufTensorOut& t : tensors) {
    const auto info = ggml_type_info(static_cast<uint32_t>(t.type));
    SBP_CHECK(info && !t.hf_shape.empty() && t.hf_shape.size() <= 4,
              "write_gguf: tensor '" + t.name + "' has no writable type or shape");
    h.str(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.hf_shape.size()));
    int64_t numel = 1;
    for (auto it = t.hf_shape.rbegin(); it != t.hf_shape.rend(); ++it) {
      h.put<uint64_t>(static_cast<uint64_t>(*it));
      numel = checked_mul(numel, *it, "the elements of tensor '" + t.name + "'");
    }
    SBP_CHECK(t.hf_shape.back() % info->block_elems == 0,
              "write_gguf: tensor '" + t.name + "' rows are not whole " + info->name + " blocks");
    h.put<uint32_t>(static_cast<uint32_t>(t.type));
    h.put<uint64_t>(offset);
    const uint64_t nb = static_cast<uint64_t>(numel / info->block_elems * info->block_bytes);
    sizes.push_back(nb);
    offset = round_up(offset + nb, kDefaultAlignment, "tensor offsets");
  }
  h.b.append((kDefaultAlignment - h.b.size() % kDefaultAlignment) % kDefaultAlignment, '\0');

  OutputFile out(path);
  out.write(h.b);
  std::vector<unsigned char> buf;
  const std::string pad(kDefaultAlignment, '\0');
  for (size_t k = 0; k < tensors.size(); ++k) {
    const GgufTensorOut& t = tensors[k];
    const auto info = ggml_type_info(static_cast<uint32_t>(t.type));
    buf.resize(static_cast<size_t>(sizes[k]));
    quantize(t.type, t.data, buf.data(), static_cast<int64_t>(sizes[k] / info->block_bytes) *
                                             info->block_elems);
    out.write(buf.data(), buf.size());
    out.write(pad.data(), static_cast<size_t>((kDefaultAlignment - sizes[k] % kDefaultAlignment) %
                                              kDefaultAlignment));
  }
  out.commit();
}

}  // namespace sbp
