#pragma once
// GGUF files (llama.cpp's format, versions 2 and 3), read and written:
//   magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
//   metadata: key (u64 length + bytes), u32 value type, value (scalars, strings, arrays),
//   tensor infos: name, u32 n_dims, u64 ne[n_dims] (ne[0] the row length), u32 ggml type,
//                 u64 offset into the data region,
//   padding to general.alignment (default 32), then the data region.
// Files are untrusted: everything is validated before a tensor is used (every length against
// the bytes left, counts, key and name uniqueness, types, shapes, the byte size of each tensor
// with overflow checks, offsets aligned and laid out as llama.cpp lays them: in order, each at
// the previous one's end rounded up to the alignment, all inside the file, and together with
// the padding after the last one the whole data region: no byte left unread). Tensor values are
// checked for finiteness as they are dequantized. Errors are one InputError line naming the
// file and the field.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "model/gguf_quant.h"

namespace sbp {

enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars: integers in `i` (unsigned ones above INT64_MAX are refused on
// reading), floats in `f`, bools in `i` (0/1), strings in `s`. Arrays: elem_type, and the
// elements in `ints`, `floats` or `strs` by element type. Arrays of arrays are refused.
struct GgufValue {
  GgufValueType type = GgufValueType::U32;
  GgufValueType elem_type = GgufValueType::U32;  // arrays only
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strs;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue str(std::string v);
  static GgufValue str_array(std::vector<std::string> v);
  static GgufValue f32_array(std::vector<double> v);
  static GgufValue i32_array(std::vector<int64_t> v);

  bool is_integer() const;  // an integer scalar type (bool excluded)
  bool is_float() const;    // F32 or F64 scalar
  bool is_array() const { return type == GgufValueType::ARRAY; }
  size_t array_size() const;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0;         // GgmlType number (validated: known, with a byte size)
  std::vector<int64_t> ne;   // ggml order: ne[0] is the row length (HF shape reversed)
  uint64_t offset = 0;       // into the data region
  uint64_t nbytes = 0;
  int64_t numel() const;
  std::vector<int64_t> hf_shape() const;  // ne reversed: (rows..., ne[0])
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // opens, maps and validates
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;        // null if absent
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed metadata access; each throws InputError naming the file and the key when the key is
  // absent (the non-optional ones) or has another type.
  std::optional<int64_t> get_int(const std::string& key) const;   // any integer type
  std::optional<double> get_float(const std::string& key) const;  // a float or an integer
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  int64_t require_int(const std::string& key) const;
  std::string require_string(const std::string& key) const;

  // The raw bytes of a tensor (inside the mapping).
  const unsigned char* data(const GgufTensorInfo& t) const { return data_ + t.offset; }
  // All elements of a readable tensor as fp32 (dst holds numel()); InputError naming the tensor
  // when its type is one dequantize() does not read, or when a value is NaN or infinite (naming
  // the element, and for a quantized type its block: an inf or NaN block scale).
  void dequantize_into(const GgufTensorInfo& t, float* dst) const;

 private:
  void parse();
  std::string path_;
  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  const unsigned char* data_ = nullptr;  // start of the data region (inside the mapping)
};

// A tensor to write: its HF shape (rows..., row length), the ggml type to store it as, and its
// fp32 values (quantized on writing).
struct GgufTensorOut {
  std::string name;
  std::vector<int64_t> hf_shape;
  GgmlType type = GgmlType::F32;
  const float* data = nullptr;
};

// Writes a GGUF v3 file (alignment 32, general.alignment not written) through OutputFile:
// whole or not at all. Metadata in the given order; keys must be unique.
void write_gguf(const std::string& path,
                const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorOut>& tensors);

}  // namespace sbp
