#include "train/rank_settings.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <span>
#include <system_error>
#include <vector>

#include "dist/weight_digest.h"
#include "train/checkpoint.h"

namespace sbp {

namespace {

namespace fs = std::filesystem;

// Directory files larger than this are recorded by size only (weights in another format, logs).
constexpr int64_t kDirFileHashLimit = int64_t{64} << 20;
// A safetensors header is JSON naming every tensor: a few MB at most in real models. One that
// claims more is hashed up to here (the loader refuses it anyway).
constexpr int64_t kHeaderHashLimit = int64_t{64} << 20;

// Config keys each rank may set for itself: its machine's thread count.
const char* const kPerRankKeys[] = {"threads"};

// Keys whose default is derived from another key (their rows in config_keys.cpp): they go
// last, so that ranks that differ in the source (output_dir, max_tokens) are told about it, not
// about its consequence.
const char* const kDerivedKeys[] = {"metrics", "data.max_seq_len"};

bool listed(const std::string& key, std::span<const char* const> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return key == n; });
}

bool is_input(const TrainConfig& c, const std::string& key) {
  const std::vector<TrainConfig::Input> inputs = c.inputs();
  return std::any_of(inputs.begin(), inputs.end(),
                     [&](const TrainConfig::Input& in) { return key == in.key; });
}

// FNV-1a of up to `limit` bytes of `f` from its current position; false on a read error.
bool hash_stream(std::FILE* f, int64_t limit, uint64_t* h, int64_t* read) {
  std::vector<char> buf(size_t{1} << 16);
  *read = 0;
  while (*read < limit) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(limit - *read, 1 << 16));
    const size_t n = std::fread(buf.data(), 1, want, f);
    *h = fnv1a64(buf.data(), n, *h);
    *read += static_cast<int64_t>(n);
    if (n < want) return std::ferror(f) == 0;
  }
  return true;
}

// A regular file's digest as text. Safetensors: the size and the 8-byte length + JSON header
// (every tensor's name, dtype, shape and offsets), not the weights.
std::string file_digest(const fs::path& p, bool whole_content) {
  std::error_code ec;
  const int64_t bytes = static_cast<int64_t>(fs::file_size(p, ec));
  if (ec) return "unreadable: " + ec.message();
  const bool safetensors = p.filename().string().ends_with(".safetensors");
  if (!whole_content && !safetensors && bytes > kDirFileHashLimit)
    return std::to_string(bytes) + " bytes (not hashed)";
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return "unreadable";
  uint64_t h = fnv1a64(nullptr, 0);
  int64_t read = 0;
  bool ok = true;
  std::string what = "fnv1a64";
  if (safetensors && !whole_content) {
    unsigned char len[8] = {};
    ok = std::fread(len, 1, 8, f) == 8;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    h = fnv1a64(len, 8, h);
    if (ok)
      ok = hash_stream(f, static_cast<int64_t>(std::min<uint64_t>(n, kHeaderHashLimit)), &h, &read);
    what = "header fnv1a64";
  } else {
    ok = hash_stream(f, INT64_MAX, &h, &read);
  }
  std::fclose(f);
  if (!ok) return "unreadable";
  return std::to_string(bytes) + " bytes, " + what + " " + hex_digest(h);
}

// Weights are compared tensor by tensor, by content (dist/weight_digest.h): the model, adapter,
// reference and value model files, and a checkpoint's weights. Not optimizer shards: each rank
// loads only its own, and they are larger than the weights.
bool weights_file(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.ends_with(".safetensors") && !n.starts_with("optimizer-");
}

// The file's digest, then (weights) each tensor's.
void append_file(std::vector<AgreedSetting>& out, const std::string& key, const fs::path& p,
                 bool whole_content) {
  out.push_back({key, file_digest(p, whole_content)});
  if (!whole_content && weights_file(p)) append_tensor_digests(out, key, p.string());
}

std::string config_value(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

void append_input_digests(std::vector<AgreedSetting>& out, const std::string& key,
                          const std::string& path, bool whole_content) {
  if (path.empty()) {
    out.push_back({key, "(none)"});
    return;
  }
  const fs::path p(path);
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);  // follows symlinks: what a reader would open
  if (fs::is_regular_file(st)) {
    append_file(out, key, p, whole_content);
    return;
  }
  if (!fs::is_directory(st)) {
    // A preset name, a missing path, a device or a FIFO (never opened: reading one may block).
    out.push_back({key, (fs::exists(st) ? "not a regular file: " : "no such file: ") + path});
    return;
  }
  out.push_back({key, "directory"});
  std::vector<std::string> names;
  for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fec;
    if (it->is_regular_file(fec)) names.push_back(it->path().filename().string());
  }
  if (ec) {
    out.back().value = "unreadable directory: " + ec.message();
    return;
  }
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) append_file(out, key + "/" + n, p / n, false);
}

std::vector<AgreedSetting> settings_ranks_must_share(const TrainConfig& c,
                                                     const std::string& resume) {
  std::vector<AgreedSetting> out;
  // Config keys, sorted (nlohmann::json's object order), then those with derived defaults.
  const nlohmann::json j = c.to_json();
  for (const auto& [key, value] : j.items()) {
    // Config keys naming inputs (TrainConfig::inputs) are compared by content, below.
    if (listed(key, kPerRankKeys) || is_input(c, key) || listed(key, kDerivedKeys)) continue;
    out.push_back({key, config_value(value)});
  }
  for (const char* key : kDerivedKeys)
    if (j.contains(key)) out.push_back({key, config_value(j[key])});
  // Inputs by content. Data files are small next to weights and read whole by the run anyway.
  for (const TrainConfig::Input& in : c.inputs()) {
    if (in.text)  // records given in memory: their lines, as a file's would be
      out.push_back({in.key, "in memory, " + std::to_string(in.text->size()) + " bytes, fnv1a64 " +
                                 std::to_string(fnv1a64(in.text->data(), in.text->size()))});
    else
      append_input_digests(out, in.key, in.path, in.data);
  }
  // The checkpoint resumed from: the one each rank would pick (the newest in an output
  // directory), its state file whole and its weights and optimizer shards by header.
  std::string ckpt;
  if (!resume.empty()) {
    try {
      ckpt = resolve_resume_dir(resume);
    } catch (const Error&) {
      ckpt = resume;  // recorded as what is there; the run reports it
    }
  }
  const size_t resume_at = out.size();
  append_input_digests(out, "--resume", ckpt, false);
  // Named by the checkpoint's own name (checkpoint-<step>), which ranks sharing the files share.
  if (out[resume_at].value == "directory") {
    fs::path p = fs::path(ckpt).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "out/checkpoint-2/"
    out[resume_at].value += " " + p.filename().string();
  }
  if (!ckpt.empty() && fs::is_directory(fs::path(ckpt) / "value_model"))
    append_input_digests(out, "--resume/value_model", (fs::path(ckpt) / "value_model").string(),
                         false);
  return out;
}

}  // namespace sbp
