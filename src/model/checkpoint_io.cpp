#include "model/checkpoint_io.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/input_file.h"
#include "core/output_paths.h"
#include "model/safetensors.h"

namespace sbp {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Where one tensor lives.
struct Located {
  const SafetensorsFile* file = nullptr;
  const SafetensorsEntry* entry = nullptr;
};

// A shard name from an index must be a plain file name inside the model directory.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

json read_json_file(const std::string& path) {
  check_input_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open");
  try {
    return parse_untrusted_json(in, path);
  } catch (const json::exception& e) {
    throw InputError(path + ": invalid JSON: " + e.what());
  }
}

// Opens the checkpoint files of `dir` and maps every tensor name to its file, checking that
// each name appears once and, for a sharded checkpoint, that the index and the shards agree.
// `source` receives the file that lists the tensors (model.safetensors or the index).
std::map<std::string, Located> open_checkpoint(const std::string& dir,
                                               std::vector<std::unique_ptr<SafetensorsFile>>* files,
                                               std::string* source) {
  const fs::path d(dir);
  const std::string index_path = (d / kIndexFile).string();
  const std::string single_path = (d / kSingleFile).string();
  std::map<std::string, Located> where;

  if (!fs::exists(index_path)) {
    if (!fs::exists(single_path)) {
      std::string hint;
      if (fs::exists(d / "pytorch_model.bin") || fs::exists(d / "pytorch_model.bin.index.json"))
        hint = " (PyTorch .bin checkpoints are not supported: convert them to safetensors)";
      throw InputError(dir + ": no " + kSingleFile + " or " + kIndexFile + hint);
    }
    *source = single_path;
    files->push_back(std::make_unique<SafetensorsFile>(single_path));
    for (const auto& e : files->back()->entries())
      where[e.name] = {files->back().get(), &e};  // names are unique within a file
    return where;
  }

  *source = index_path;
  const json index = read_json_file(index_path);
  if (!index.is_object()) throw InputError(index_path + ": must be a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end()) throw InputError(index_path + ": missing 'weight_map'");
  if (!wm->is_object())
    throw InputError(index_path + ": 'weight_map' must be an object of tensor name -> shard file");
  std::map<std::string, std::string> shard_of;  // tensor -> shard file name
  std::set<std::string> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      throw InputError(index_path + ": weight_map entry for '" + it.key() +
                       "' must be a string (shard file name), got " + it->dump());
    }
    const std::string shard = it->get<std::string>();
    if (!plain_file_name(shard)) {
      throw InputError(index_path + ": weight_map entry for '" + it.key() + "' names shard '" +
                       shard + "', which is not a plain file name in the model directory");
    }
    shard_of[it.key()] = shard;
    shards.insert(shard);
  }
  // Open every shard first: a missing shard is reported before anything else.
  std::map<std::string, const SafetensorsFile*> by_shard;
  for (const std::string& s : shards) {
    const std::string p = (d / s).string();
    if (!fs::exists(p)) {
      throw InputError(index_path + ": shard '" + s +
                       "' (named in weight_map) does not exist: " + p);
    }
    files->push_back(std::make_unique<SafetensorsFile>(p));
    by_shard[s] = files->back().get();
  }
  for (const auto& [s, f] : by_shard) {
    for (const auto& e : f->entries()) {
      auto it = shard_of.find(e.name);
      if (it == shard_of.end()) {
        throw InputError(f->path() + ": tensor '" + e.name + "' is not listed in " + index_path);
      }
      if (it->second != s) {
        throw InputError(f->path() + ": tensor '" + e.name + "' is also stored here, but " +
                         index_path + " maps it to '" + it->second + "'");
      }
      where[e.name] = {f, &e};
    }
  }
  for (const auto& [name, s] : shard_of) {
    if (!where.count(name)) {
      throw InputError((d / s).string() + ": does not contain tensor '" + name + "' that " +
                       index_path + " maps to it");
    }
  }
  return where;
}

// "a/b/" -> "a/b": the temporary and backup siblings are derived from the last component.
fs::path normalized_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return fs::path(s);
}

// Writes a small text file and fsyncs it: the directory rename that publishes it must not
// be able to reach the disk before its contents do.
void write_text_file(const fs::path& p, const std::string& text) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(p.string() + ": cannot create: " + std::strerror(errno));
  const char* b = text.data();
  size_t n = text.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw InputError(p.string() + ": write failed: " + why);
    }
    b += w;
    n -= static_cast<size_t>(w);
  }
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) throw InputError(p.string() + ": cannot write: " + std::strerror(errno));
}

std::string shard_name(int64_t i, int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05lld-of-%05lld.safetensors", static_cast<long long>(i),
                static_cast<long long>(n));
  return buf;
}

}  // namespace

// A NaN or infinite weight makes every loss NaN: `score` printed "loss nan" with exit 0, and
// `train` ran until its non-finite guard stopped the first step. Checked from the file in
// bounded pieces (read as F32, which keeps BF16/F16 values exactly), before anything is copied.
void check_weights_finite(const SafetensorsFile& file, const std::string& name, int64_t numel) {
  const int64_t piece = std::min<int64_t>(numel, int64_t{1} << 20);
  std::vector<float> buf(static_cast<size_t>(piece));
  for (int64_t i = 0; i < numel; i += piece) {
    const int64_t m = std::min(piece, numel - i);
    file.read_range_into(name, i, Tensor(buf.data(), DType::F32, Shape{m}));
    for (int64_t j = 0; j < m; ++j) {
      const float x = buf[static_cast<size_t>(j)];
      if (std::isfinite(x)) continue;
      throw InputError(file.path() + ": tensor '" + name + "' element " + std::to_string(i + j) +
                       " is " + (std::isnan(x) ? "nan" : "infinite") + " (weights must be finite)");
    }
  }
}

// Rotary tables are derived from the config, and older Llama checkpoints carry them as buffers.
bool ignorable_tensor(const std::string& name) {
  return name.ends_with(".self_attn.rotary_emb.inv_freq");
}

ModelFiles open_model_files(const std::string& dir) {
  ModelFiles m;
  for (const auto& [name, loc] : open_checkpoint(dir, &m.files, &m.source)) m.where[name] = loc.file;
  return m;
}

void load_weights(const std::string& dir, const ModelConfig& cfg, ParameterSet& params) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::string source;
  const std::map<std::string, Located> where = open_checkpoint(dir, &files, &source);
  const std::vector<ParamSpec> specs = parameter_specs(cfg);

  // Validate everything before copying anything, so a bad checkpoint leaves params untouched.
  std::set<std::string> expected;
  for (const ParamSpec& s : specs) {
    expected.insert(s.name);
    const std::optional<size_t> i = params.find(s.id);
    if (!i || params.tensor(*i).shape != s.shape) {
      throw ShapeError("load_weights: parameter set does not match the config at '" + s.name + "'");
    }
    auto it = where.find(s.name);
    if (it == where.end()) {
      throw InputError(source + ": tensor '" + s.name + "' (shape " + s.shape.str() +
                       ", implied by config.json) is missing from the checkpoint");
    }
    const SafetensorsEntry& e = *it->second.entry;
    if (e.shape != s.shape) {
      throw InputError(it->second.file->path() + ": tensor '" + s.name + "' has shape " +
                       e.shape.str() + " but config.json implies " + s.shape.str());
    }
  }
  SBP_CHECK(params.size() == specs.size(), "load_weights: parameter set has extra tensors");
  const std::string kLmHead = hf_name(model_param(ParamRole::lm_head), norm_layout(cfg));
  const std::string kEmbed = hf_name(model_param(ParamRole::embed), norm_layout(cfg));
  const Located* tied_head = nullptr;
  for (const auto& [name, loc] : where) {
    if (expected.count(name) || ignorable_tensor(name)) continue;
    if (cfg.tie_word_embeddings && name == kLmHead) {
      const Shape want = params.get(kEmbed).shape;
      if (loc.entry->shape != want) {
        throw InputError(loc.file->path() + ": tensor '" + name + "' has shape " +
                         loc.entry->shape.str() + " but config.json implies " + want.str() +
                         " (tied to the embedding)");
      }
      tied_head = &loc;
      continue;
    }
    throw InputError(loc.file->path() + ": unexpected tensor '" + name +
                     "' (not a parameter of this " + model_type_name(cfg.model_type) + " config)");
  }

  // A tied checkpoint that still carries lm_head.weight: the model will use the embedding,
  // so accept the extra tensor only if it says the same thing after conversion to the
  // parameters' dtype. Compared from the file in bounded pieces, before anything is copied.
  const Tensor& embed = params.get(kEmbed);
  if (tied_head && embed.data) {
    const Located& src = where.at(kEmbed);
    const int64_t total = embed.numel();
    const int64_t piece = std::min<int64_t>(total, int64_t{1} << 20);
    const size_t esz = dtype_size(embed.dtype);
    std::vector<unsigned char> a(static_cast<size_t>(piece) * esz), b(a.size());
    for (int64_t i = 0; i < total; i += piece) {
      const int64_t m = std::min(piece, total - i);
      src.file->read_range_into(kEmbed, i, Tensor(a.data(), embed.dtype, Shape{m}));
      tied_head->file->read_range_into(kLmHead, i, Tensor(b.data(), embed.dtype, Shape{m}));
      if (std::memcmp(a.data(), b.data(), static_cast<size_t>(m) * esz) != 0) {
        throw InputError(tied_head->file->path() + ": tensor '" + kLmHead + "' differs from " +
                         kEmbed +
                         ", but config.json sets tie_word_embeddings (the checkpoint "
                         "is not a tied model)");
      }
    }
  }

  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    if (!t.data) continue;  // shape-only parameter set: validation is all there is to do
    check_weights_finite(*where.at(params.name(i)).file, params.name(i), t.numel());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    if (!t.data) continue;
    where.at(params.name(i)).file->read_into(params.name(i), t);
  }
}

bool is_model_dir_file(const std::string& name) {
  if (name == "config.json" || name == kSingleFile || name == kIndexFile ||
      name == kGenerationConfigFile)
    return true;
  for (const char* t : kTokenizerFiles)
    if (name == t) return true;
  // model-<i>-of-<n>.safetensors, as shard_name() writes them.
  const std::string pre = "model-", post = ".safetensors";
  if (name.size() != pre.size() + 14 + post.size() || !name.starts_with(pre) ||
      !name.ends_with(post))
    return false;
  const std::string mid = name.substr(pre.size(), 14);  // 00001-of-00002
  for (size_t i = 0; i < mid.size(); ++i) {
    const bool digit = mid[i] >= '0' && mid[i] <= '9';
    if ((i >= 5 && i < 9) ? mid.substr(5, 4) != "-of-" : !digit) return false;
  }
  return true;
}

std::vector<std::string> companion_files(const std::string& tokenizer_dir,
                                         const std::string& model_dir) {
  std::vector<std::string> out;
  if (!tokenizer_dir.empty())
    for (const char* name : kTokenizerFiles) {
      const fs::path p = fs::path(tokenizer_dir) / name;
      if (fs::is_regular_file(p)) out.push_back(p.string());
    }
  if (!model_dir.empty()) {
    const fs::path p = fs::path(model_dir) / kGenerationConfigFile;
    if (fs::is_regular_file(p)) out.push_back(p.string());
  }
  return out;
}

bool has_tokenizer_files(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / "tokenizer.json") ||
         fs::is_regular_file(fs::path(dir) / "tokenizer_config.json");
}

void save_model_dir(const std::string& dir_arg, const ModelConfig& cfg, const ParameterSet& params,
                    DType dtype, int64_t max_shard_bytes,
                    const std::vector<std::string>& companions,
                    const std::vector<GeneratedFile>& generated) {
  const char* torch_dtype = torch_dtype_name(dtype);
  if (dtype == DType::I32) {  // never a checkpoint's weights
    throw InputError(dir_arg + ": cannot save weights as " + std::string(dtype_name(dtype)) +
                     " (F32, BF16 or F16)");
  }
  if (dir_arg.empty()) throw InputError("save_model_dir: empty directory name");
  const fs::path dir = normalized_dir(dir_arg);
  if (dir.filename().empty() || dir.filename() == "." || dir.filename() == "..")
    throw InputError(dir_arg + ": not a usable model directory name");

  // The tensors, in checkpoint order; checked against the config before touching the disk.
  const std::vector<ParamSpec> specs = parameter_specs(cfg);
  std::vector<NamedTensor> tensors;
  for (const ParamSpec& s : specs) {
    const std::optional<size_t> i = params.find(s.id);
    if (!i) throw ShapeError("save_model_dir: parameter set has no '" + s.name + "'");
    const Tensor& t = params.tensor(*i);
    SBP_CHECK(t.shape == s.shape, "save_model_dir: '" + s.name + "' is " + t.describe() +
                                      ", config implies " + s.shape.str());
    SBP_CHECK(t.data != nullptr, "save_model_dir: '" + s.name + "' has no data");
    tensors.push_back({s.name, t});
  }

  // The directory is replaced as a whole, so refuse anything that is not ours to replace:
  // a directory is ours only when every file in it is one this function writes
  // (core/output_paths.h). A checkpoint (optimizer.safetensors, trainer_state.json), a user's
  // file or a subdirectory would otherwise be deleted with it.
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(dir));
  if (exists) {
    if (fs::is_symlink(fs::symlink_status(dir)) || !fs::is_directory(dir))
      throw InputError(dir.string() + ": exists and is not a directory; refusing to replace it");
    const bool empty = fs::is_empty(dir, ec);
    if (!empty && !fs::exists(dir / "config.json")) {
      throw InputError(dir.string() +
                       ": exists, is not empty and has no config.json (not a model directory); "
                       "refusing to replace it");
    }
    const std::string foreign = first_foreign_file(dir.string(), is_model_dir_file);
    if (!foreign.empty())
      throw InputError(dir.string() + ": holds " + foreign +
                       ", which is not a model directory's file (config.json, "
                       "model*.safetensors, its index, generation_config.json, tokenizer "
                       "files); refusing to replace it");
  }
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw InputError(parent.string() + ": cannot create directory: " + ec.message());

  const std::string pid = std::to_string(::getpid());
  const fs::path tmp = fs::path(dir.string() + ".tmp-" + pid);
  const fs::path old = fs::path(dir.string() + ".old-" + pid);
  fs::path replaced;  // where the previous model ends up, removed once the new one is in place
  fs::remove_all(tmp, ec);  // a leftover of an earlier crashed save by a process of this pid
  if (!fs::create_directory(tmp, ec) || ec) {
    throw InputError(tmp.string() + ": cannot create temporary directory: " +
                     (ec ? ec.message() : "already exists"));
  }
  try {
    json cj = cfg.to_json();
    cj["torch_dtype"] = torch_dtype;
    if (cj.contains("dtype")) cj["dtype"] = torch_dtype;  // newer transformers' spelling
    write_text_file(tmp / "config.json", cj.dump(2) + "\n");
    for (const std::string& c : companions) {
      const fs::path name = fs::path(c).filename();
      SBP_CHECK(!fs::exists(tmp / name), "save_model_dir: companion file " + c + " given twice");
      write_text_file(tmp / name, read_input_file(c));
    }
    for (const GeneratedFile& g : generated) {
      SBP_CHECK(is_model_dir_file(g.name) && !fs::exists(tmp / g.name),
                "save_model_dir: generated file " + g.name + " is not a new model-directory file");
      write_text_file(tmp / g.name, g.text);
    }

    // Shards as save_pretrained cuts them: in order, a new shard when the next tensor would
    // push the current one past the limit (a tensor larger than the limit gets its own).
    int64_t total = 0;
    std::vector<std::vector<NamedTensor>> shards(1);
    int64_t cur = 0;
    for (const NamedTensor& t : tensors) {
      const int64_t b = t.tensor.numel() * static_cast<int64_t>(dtype_size(dtype));
      if (max_shard_bytes > 0 && cur > 0 && cur + b > max_shard_bytes) {
        shards.emplace_back();
        cur = 0;
      }
      shards.back().push_back(t);
      cur += b;
      total += b;
    }
    if (shards.size() == 1) {
      write_safetensors((tmp / kSingleFile).string(), tensors, dtype);
    } else {
      const int64_t n = static_cast<int64_t>(shards.size());
      json weight_map = json::object();
      for (int64_t i = 0; i < n; ++i) {
        const std::string name = shard_name(i + 1, n);
        write_safetensors((tmp / name).string(), shards[static_cast<size_t>(i)], dtype);
        for (const NamedTensor& t : shards[static_cast<size_t>(i)]) weight_map[t.name] = name;
      }
      json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      write_text_file(tmp / kIndexFile, index.dump(2) + "\n");
    }
    fsync_directory(tmp.string());

    if (!exists) {
      fs::rename(tmp, dir);
    } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      // Atomic swap: `dir` is the new model at every instant; `tmp` now holds the old one.
      replaced = tmp;
    } else if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
      // No RENAME_EXCHANGE on this file system: dir -> old, tmp -> dir. `dir` is briefly
      // absent, but a complete model always exists under one of the two names.
      fs::remove_all(old, ec);
      fs::rename(dir, old);
      try {
        fs::rename(tmp, dir);
      } catch (...) {
        fs::rename(old, dir, ec);  // put the previous model back
        throw;
      }
      replaced = old;
    } else {
      throw InputError(dir.string() + ": cannot replace with " + tmp.string() + ": " +
                       std::strerror(errno));
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw InputError(dir.string() + ": cannot save model directory: " + e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fsync_directory(parent.string());
  if (!replaced.empty()) fs::remove_all(replaced, ec);
}

ModelConfig load_config(const std::string& path) {
  if (fs::is_directory(path)) {
    const fs::path cfg = fs::path(path) / "config.json";
    if (!fs::exists(cfg)) throw InputError(path + ": directory has no config.json");
    return ModelConfig::from_file(cfg.string());
  }
  if (!fs::exists(path)) throw InputError(path + ": no such model directory or config file");
  return ModelConfig::from_file(path);
}

}  // namespace sbp
