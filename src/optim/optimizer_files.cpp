#include "optim/optimizer_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "core/memory.h"
#include "model/safetensors.h"

namespace sbp {

namespace fs = std::filesystem;

namespace {

int64_t parse_step(const SafetensorsFile& f) {
  auto it = f.metadata().find("step");
  if (it == f.metadata().end()) throw InputError(f.path() + ": metadata has no \"step\"");
  try {
    size_t used = 0;
    const int64_t s = std::stoll(it->second, &used);
    if (used == it->second.size() && s >= 0) return s;
  } catch (const std::exception&) {
  }
  throw InputError(f.path() + ": metadata step '" + it->second + "' is not a number");
}

// optimizer-rank<r>-of-<R>.safetensors -> (r, R); false for any other name.
bool parse_shard_name(const std::string& name, int* rank, int* ranks) {
  int r = -1, n = -1, used = 0;
  if (std::sscanf(name.c_str(), "optimizer-rank%5d-of-%5d.safetensors%n", &r, &n, &used) != 2)
    return false;
  if (static_cast<size_t>(used) != name.size() || r < 0 || n < 1 || r >= n) return false;
  if (name != optimizer_shard_file(r, n)) return false;
  *rank = r;
  *ranks = n;
  return true;
}

// Every tensor of an optimizer file is a moment this run reads: one it does not (a parameter
// this model lacks, a misspelled name) is state left unread, so the file is not this run's.
void refuse_unread_tensors(const SafetensorsFile& f, const std::set<std::string>& read) {
  for (const SafetensorsEntry& e : f.entries())
    if (!read.count(e.name))
      throw InputError(f.path() + ": unexpected tensor '" + e.name +
                       "' (not a moment of a parameter this run trains)");
}

void read_whole(const fs::path& path, const std::vector<MomentSlice>& into, int64_t* steps) {
  SafetensorsFile f(path.string());
  std::set<std::string> read;
  for (const MomentSlice& s : into) read.insert({"m." + s.name, "v." + s.name});
  refuse_unread_tensors(f, read);
  for (const MomentSlice& s : into) {
    for (const auto& [prefix, dst] : {std::pair{"m.", s.m}, std::pair{"v.", s.v}}) {
      const std::string name = prefix + s.name;
      const SafetensorsEntry* e = f.find(name);
      if (e && s.range.count != s.numel && e->shape.numel() != s.numel)
        throw InputError(f.path() + ": tensor '" + name + "' has " +
                         std::to_string(e->shape.numel()) + " elements, the parameter " +
                         std::to_string(s.numel));
      if (s.range.count == s.numel)
        f.read_into(name, dst);  // names the tensor and the shapes on a mismatch
      else
        f.read_range_into(name, s.range.offset, dst.reshaped({s.range.count}));
    }
  }
  *steps = parse_step(f);
}

void read_shards(const fs::path& dir, int ranks, const std::vector<MomentSlice>& into,
                 int64_t* steps) {
  for (int r = 0; r < ranks; ++r) {
    const fs::path path = dir / optimizer_shard_file(r, ranks);
    if (!fs::exists(path))
      throw InputError(path.string() + ": missing (the optimizer was saved in " +
                       std::to_string(ranks) + " shards)");
    SafetensorsFile f(path.string());
    const int64_t step = parse_step(f);
    if (r == 0) *steps = step;
    if (step != *steps)
      throw InputError(path.string() + ": step " + std::to_string(step) + ", but " +
                       optimizer_shard_file(0, ranks) + " has " + std::to_string(*steps));
    std::set<std::string> written;  // what write_optimizer_shard wrote for rank r
    for (const MomentSlice& s : into)
      if (shard_range(s.numel, ranks, r).count > 0) written.insert({"m." + s.name, "v." + s.name});
    refuse_unread_tensors(f, written);
    for (const MomentSlice& s : into) {
      const ShardRange saved = shard_range(s.numel, ranks, r);
      const int64_t begin = std::max(saved.offset, s.range.offset),
                    end = std::min(saved.end(), s.range.end());
      if (begin >= end) continue;
      for (const auto& [prefix, dst] : {std::pair{"m.", s.m}, std::pair{"v.", s.v}}) {
        const std::string name = prefix + s.name;
        const SafetensorsEntry* e = f.find(name);
        if (!e) throw InputError(path.string() + ": no tensor named '" + name + "'");
        if (e->shape.numel() != saved.count)
          throw InputError(path.string() + ": tensor '" + name + "' has " +
                           std::to_string(e->shape.numel()) + " elements, but rank " +
                           std::to_string(r) + "'s slice of the " + std::to_string(s.numel) +
                           "-element parameter has " + std::to_string(saved.count));
        const Tensor part = flat_slice(dst, ShardRange{begin - s.range.offset, end - begin});
        f.read_range_into(name, begin - saved.offset, part);
      }
    }
  }
}

// AdamW divides by sqrt(v) + eps: a NaN or infinite moment, or a negative second moment (whose
// square root is NaN), would turn every later update into NaN. A file that holds one is not
// state this optimizer could have written, so it is refused before the first step.
void check_moments(const std::string& where, const std::vector<MomentSlice>& slices) {
  for (const MomentSlice& s : slices) {
    for (const auto& [prefix, t] : {std::pair{"m.", s.m}, std::pair{"v.", s.v}}) {
      const std::vector<float> x = download_f32(t);
      for (size_t i = 0; i < x.size(); ++i) {
        const bool ok = std::isfinite(x[i]) && (prefix[0] == 'm' || x[i] >= 0.0f);
        if (ok) continue;
        throw InputError(where + ": tensor '" + prefix + s.name + "' element " +
                         std::to_string(s.range.offset + static_cast<int64_t>(i)) + " is " +
                         std::to_string(x[i]) +
                         (prefix[0] == 'm' ? " (a first moment must be finite)"
                                           : " (a second moment must be finite and >= 0)"));
      }
    }
  }
}

}  // namespace

std::vector<MomentSlice> moment_slices(const AdamW& opt) {
  std::vector<MomentSlice> out;
  for (size_t i = 0; i < opt.m().size(); ++i) {
    const int64_t n = opt.m().tensor(i).numel();
    out.push_back({opt.m().name(i), n, ShardRange{0, n}, opt.m().tensor(i), opt.v().tensor(i)});
  }
  return out;
}

std::vector<MomentSlice> moment_slices(const ShardedAdamW& opt) {
  std::vector<MomentSlice> out;
  for (size_t i = 0; i < opt.size(); ++i)
    out.push_back({opt.spec(i).name, opt.spec(i).shape.numel(), opt.range(i), opt.m(i), opt.v(i)});
  return out;
}

std::string optimizer_shard_file(int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-rank%05d-of-%05d.safetensors", rank, ranks);
  return buf;
}

void write_optimizer_file(const std::string& dir, const std::vector<MomentSlice>& whole,
                          int64_t steps) {
  std::vector<NamedTensor> moments;
  for (const MomentSlice& s : whole) {
    SBP_CHECK(s.range.count == s.numel, "write_optimizer_file: " + s.name + " is not whole");
    moments.push_back({"m." + s.name, s.m});
  }
  for (const MomentSlice& s : whole) moments.push_back({"v." + s.name, s.v});
  write_safetensors((fs::path(dir) / kOptimizerFile).string(), moments, DType::F32,
                    {{"step", std::to_string(steps)}});
}

void write_optimizer_shard(const std::string& dir, const std::vector<MomentSlice>& mine,
                           int64_t steps, int rank, int ranks) {
  std::vector<NamedTensor> moments;
  for (const MomentSlice& s : mine)
    if (s.range.count > 0) moments.push_back({"m." + s.name, s.m.reshaped({s.range.count})});
  for (const MomentSlice& s : mine)
    if (s.range.count > 0) moments.push_back({"v." + s.name, s.v.reshaped({s.range.count})});
  write_safetensors((fs::path(dir) / optimizer_shard_file(rank, ranks)).string(), moments,
                    DType::F32,
                    {{"step", std::to_string(steps)},
                     {"rank", std::to_string(rank)},
                     {"ranks", std::to_string(ranks)}});
}

int64_t read_optimizer_state(const std::string& dir_name, const std::vector<MomentSlice>& into) {
  const fs::path dir(dir_name);
  int64_t steps = 0;
  if (fs::exists(dir / kOptimizerFile)) {
    read_whole(dir / kOptimizerFile, into, &steps);
    check_moments((dir / kOptimizerFile).string(), into);
    return steps;
  }
  // Shard files: one complete set, of one rank count.
  int ranks = 0;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      int r = 0, n = 0;
      if (!parse_shard_name(e.path().filename().string(), &r, &n)) continue;
      if (ranks != 0 && n != ranks)
        throw InputError(dir_name + ": optimizer shards of two runs (" + std::to_string(ranks) +
                         " and " + std::to_string(n) + " ranks)");
      ranks = n;
    }
  }
  if (ranks == 0)
    throw InputError((dir / kOptimizerFile).string() + ": missing (not a training checkpoint?)");
  read_shards(dir, ranks, into, &steps);
  check_moments(dir_name + " (optimizer shards of " + std::to_string(ranks) + " ranks)", into);
  return steps;
}

}  // namespace sbp
