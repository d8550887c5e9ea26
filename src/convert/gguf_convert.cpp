#include "convert/gguf_convert.h"

#include <cstdio>
#include <filesystem>
#include <set>
#include <vector>

#include "backend/backend_factory.h"
#include "convert/gguf_arch.h"
#include "convert/gguf_tokenizer.h"
#include "core/error.h"
#include "core/memory.h"
#include "model/checkpoint_io.h"
#include "model/gguf_file.h"
#include "model/parameters.h"

namespace sbp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

std::vector<int64_t> dims_of(const Shape& s) {
  return std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.ndim);
}

// general.file_type is llama_ftype (llama.h): 0 all F32 to 38 MXFP4 (numbers llama.cpp has since
// retired, 4 to 6 and 33 to 35, still appear in old files), optionally with 1024 (guessed).
// The converter takes each tensor's own type, but a number outside the enumeration means the
// metadata is not what llama.cpp wrote.
void check_file_type(const GgufFile& f) {
  const auto ft = f.get_int("general.file_type");  // InputError if not an integer
  if (!ft) return;
  constexpr int64_t kGuessed = 1024, kLast = 38;
  const int64_t base = *ft >= kGuessed ? *ft - kGuessed : *ft;
  if (base < 0 || base > kLast)
    throw InputError(f.path() + ": metadata 'general.file_type' is " + std::to_string(*ft) +
                     ", not a llama_ftype (0 to 38, plus 1024 when guessed)");
}

// Export refuses what the target type cannot represent, naming the tensor and the value: f16
// wrote inf for a weight past 65504, and q8_0 an inf block scale (the whole block inf or NaN),
// with exit 0. Checked before the output is created, so nothing is left behind.
void check_representable(const std::string& source, const std::string& name, GgmlType type,
                         const std::vector<float>& x) {
  const int64_t i = first_unrepresentable(type, x.data(), static_cast<int64_t>(x.size()));
  if (i < 0) return;
  char value[64];
  std::snprintf(value, sizeof value, "%.9g", static_cast<double>(x[static_cast<size_t>(i)]));
  const std::string tn = ggml_type_name(static_cast<uint32_t>(type));
  const std::string why = type == GgmlType::Q8_0
                              ? "its Q8_0 block scale (max |x| / 127) would be past the f16 range"
                              : "past the " + tn + " range";
  throw InputError(source + ": tensor '" + name + "' element " + std::to_string(i) + " is " +
                   value + ", " + why + ": " + tn +
                   " cannot represent it (no clamping; choose a wider type)");
}

}  // namespace

std::string convert_gguf_to_hf(const std::string& in, const std::string& out, DType dtype) {
  const GgufFile f(in);
  check_file_type(f);
  const GgufArch& arch = gguf_arch_by_name(f.require_string("general.architecture"), in);
  json cj = gguf_to_config_json(f, arch);
  // The special ids transformers' generate() reads from config.json.
  for (const auto& [gguf_key, hf_key] :
       {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
        std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"}}) {
    if (const auto id = f.get_int(gguf_key)) cj[hf_key] = *id;
  }
  cj["torch_dtype"] = torch_dtype_name(dtype);
  const ModelConfig cfg = ModelConfig::from_json(cj, in + " (metadata)");

  const std::unique_ptr<Backend> be = make_backend(BackendSpec{});
  Ledger ledger;
  Pool pool(ledger, *be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  std::set<std::string> used;
  std::vector<float> vals;
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& hf = w.name(i);
    const std::string gname = gguf_tensor_name(cfg, w.id(i));
    const GgufTensorInfo* t = f.find_tensor(gname);
    if (!t) throw InputError(in + ": tensor '" + gname + "' (" + hf + ") is missing");
    const std::vector<int64_t> want = dims_of(w.shape(i));
    if (t->hf_shape() != want)
      throw InputError(in + ": tensor '" + gname + "' has shape " + shape_str(t->hf_shape()) +
                       " (rows, row length), the metadata implies " + shape_str(want));
    vals.resize(static_cast<size_t>(t->numel()));
    f.dequantize_into(*t, vals.data());
    int64_t heads = 0;
    if (is_permuted_qk(cfg, w.id(i), &heads)) {
      const int64_t cols = want.size() == 2 ? want[1] : 1;
      permute_qk_rows(vals.data(), heads, cfg.head_dim, cols, /*to_gguf=*/false);
    }
    if (arch.norm_plus_one && is_norm_weight(w.id(i)))
      for (float& x : vals) x -= 1.0f;
    if (dtype == DType::BF16 || dtype == DType::F16)
      check_representable(in, gname, dtype == DType::BF16 ? GgmlType::BF16 : GgmlType::F16, vals);
    upload_f32(w.tensor(i), vals);
    used.insert(gname);
  }
  if (f.find_tensor("rope_freqs.weight")) used.insert("rope_freqs.weight");  // in config.json
  for (const GgufTensorInfo& t : f.tensors())
    if (!used.count(t.name))
      throw InputError(in + ": tensor '" + t.name + "' is not part of a " + arch.name +
                       " model with this metadata");

  std::vector<GeneratedFile> gen;
  if (f.find("tokenizer.ggml.model")) {
    HfTokenizerFiles tok = gguf_tokenizer_to_hf(f, cfg.max_position_embeddings);
    gen.push_back({"tokenizer.json", std::move(tok.tokenizer_json)});
    gen.push_back({"tokenizer_config.json", std::move(tok.tokenizer_config_json)});
  }
  save_model_dir(out, cfg, w, dtype, 0, {}, gen);
  char line[512];
  std::snprintf(line, sizeof line, "convert: %s (GGUF v%u, %s, %zu tensors) -> %s (%s, %s%s)",
                in.c_str(), f.version(), arch.name, f.tensors().size(), out.c_str(),
                model_type_name(cfg.model_type), dtype_name(dtype),
                gen.empty() ? ", no tokenizer in the file" : ", tokenizer");
  return line;
}

std::string convert_hf_to_gguf(const std::string& dir, const std::string& out, GgmlType type) {
  if (type != GgmlType::F16 && type != GgmlType::BF16 && type != GgmlType::Q8_0 &&
      type != GgmlType::F32)
    throw InputError("convert: --type must be f32, f16, bf16 or q8_0");
  const ModelConfig cfg = load_config(dir);
  const GgufArch& arch = gguf_arch_for(cfg.model_type);
  std::vector<std::pair<std::string, GgufValue>> meta = config_to_gguf_metadata(cfg);
  // llama_ftype: what most tensors are (0 all F32, 1 mostly F16, 7 mostly Q8_0, 32 mostly BF16).
  const uint32_t ftype = type == GgmlType::F32 ? 0 : type == GgmlType::F16 ? 1
                         : type == GgmlType::Q8_0 ? 7 : 32;
  meta.emplace_back("general.file_type", GgufValue::u32(ftype));
  meta.emplace_back("general.quantization_version", GgufValue::u32(2));
  const bool has_tokenizer = fs::exists(fs::path(dir) / "tokenizer.json");
  if (has_tokenizer)
    for (auto& kv : hf_tokenizer_to_gguf(dir, cfg.vocab_size)) meta.push_back(std::move(kv));

  const std::unique_ptr<Backend> be = make_backend(BackendSpec{});
  Ledger ledger;
  Pool pool(ledger, *be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  load_weights(dir, cfg, w);
  std::vector<std::vector<float>> vals(w.size());
  std::vector<GgufTensorOut> tensors;
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& hf = w.name(i);
    const std::vector<int64_t> shape = dims_of(w.shape(i));
    vals[i] = download_f32(w.tensor(i));
    int64_t heads = 0;
    if (is_permuted_qk(cfg, w.id(i), &heads))
      permute_qk_rows(vals[i].data(), heads, cfg.head_dim, shape.size() == 2 ? shape[1] : 1,
                      /*to_gguf=*/true);
    if (arch.norm_plus_one && is_norm_weight(w.id(i)))
      for (float& x : vals[i]) x += 1.0f;
    GgmlType t = type;
    if (shape.size() == 1) t = GgmlType::F32;  // norms and biases, as llama.cpp keeps them
    else if (t == GgmlType::Q8_0 && shape.back() % 32 != 0) t = GgmlType::F16;
    check_representable(dir, hf, t, vals[i]);
    tensors.push_back({gguf_tensor_name(cfg, w.id(i)), shape, t, vals[i].data()});
  }
  std::vector<float> rope_factors;
  if (cfg.rope_scaling.type == RopeScalingType::llama3) {
    rope_factors = llama3_rope_factors(cfg);
    tensors.push_back({"rope_freqs.weight", {static_cast<int64_t>(rope_factors.size())},
                       GgmlType::F32, rope_factors.data()});
  }
  write_gguf(out, meta, tensors);
  char line[512];
  std::snprintf(line, sizeof line, "convert: %s (%s) -> %s (GGUF v3, %s, %s, %zu tensors%s)",
                dir.c_str(), model_type_name(cfg.model_type), out.c_str(), arch.name,
                ggml_type_name(static_cast<uint32_t>(type)).c_str(), tensors.size(),
                has_tokenizer ? ", tokenizer" : ", no tokenizer.json in the directory");
  return line;
}

}  // namespace sbp
