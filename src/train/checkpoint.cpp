#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/output_paths.h"
#include "model/checkpoint_io.h"
#include "model/lora_io.h"
#include "model/safetensors.h"
#include "model/value_model_io.h"
#include "optim/optimizer_files.h"

namespace sbp {

namespace fs = std::filesystem;

namespace {

const char* const kStatePrefix = "checkpoint-";
const char* const kStagingPrefix = ".staging-checkpoint-";

std::string hex64(uint64_t x) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// Writes and fsyncs a small file (the caller renames the directory it is in). A failed write,
// fsync or close is an error: the checkpoint must not be renamed into place without it.
void write_synced(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path.string() + ": cannot write: " + errno_message());
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const std::string why = errno_message();
  if (::close(fd) != 0 || !ok)
    throw InputError(path.string() + ": write failed: " + (ok ? errno_message() : why));
}

// A copy that is on disk before the checkpoint is renamed into place (fs::copy_file does not
// fsync): tokenizer files are small.
void copy_synced(const fs::path& from, const fs::path& to) {
  write_synced(to, read_input_file(from.string()));
}

// checkpoint-<digits> -> step, else -1.
int64_t checkpoint_step(const std::string& name) {
  const std::string p = kStatePrefix;
  // At most 18 digits: the step fits int64 (a longer name is not one of ours).
  if (!name.starts_with(p) || name.size() == p.size() || name.size() > p.size() + 18) return -1;
  int64_t step = 0;
  for (size_t i = p.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const int64_t step = checkpoint_step(e.path().filename().string());
    if (step >= 0 && e.is_directory() && fs::exists(e.path() / "trainer_state.json"))
      out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The fp32 weights, for an exact resume, when the exported ones are rounded.
void write_master_weights(const fs::path& dir, const ParameterSet& w) {
  std::vector<NamedTensor> master;
  for (size_t i = 0; i < w.size(); ++i) master.push_back({w.name(i), w.tensor(i)});
  write_safetensors((dir / "master_weights.safetensors").string(), master, DType::F32);
}

// Throws unless the checkpoint's config.json describes the configured model's shape.
void check_same_shape(const std::string& dir, const ModelConfig& cfg, const std::string& what) {
  const ModelConfig saved = load_config(dir);
  if (saved.hidden_size != cfg.hidden_size || saved.num_hidden_layers != cfg.num_hidden_layers ||
      saved.vocab_size != cfg.vocab_size || saved.intermediate_size != cfg.intermediate_size ||
      saved.num_attention_heads != cfg.num_attention_heads ||
      saved.num_key_value_heads != cfg.num_key_value_heads || saved.model_type != cfg.model_type) {
    throw InputError(dir + "/config.json: the checkpoint's " + what +
                     " shape differs from the configured " + what + "'s");
  }
}

// value_model/: a Hugging Face sequence-classification directory (its optimizer state is
// written by the ranks afterwards).
void write_value_model(const fs::path& dir, const ValueModelContents& v, DType dtype) {
  fs::create_directories(dir);
  write_synced(dir / "config.json", value_model_config_json(v.cfg, dtype).dump(2) + "\n");
  std::vector<NamedTensor> tensors;
  for (const ParamSpec& s : parameter_specs(v.cfg, ModelHead::value))
    tensors.push_back({s.name, v.weights.get(s.name)});
  write_safetensors((dir / "model.safetensors").string(), tensors, dtype);
  if (dtype != DType::F32) write_master_weights(dir, v.weights);
}

// Runs `part` on this rank and agrees with the others on whether every rank succeeded: a
// rank's own error is rethrown; the others learn that some rank failed.
template <class Fn>
void on_every_rank(Communicator& comm, const std::string& what, Fn part) {
  int64_t failed = 0;
  std::exception_ptr error;
  try {
    part();
  } catch (...) {
    failed = 1;
    error = std::current_exception();
  }
  if (comm.size() > 1) failed = comm.max(failed);
  if (error) std::rethrow_exception(error);
  if (failed) throw InputError(what + ": another rank failed to write its part");
}

}  // namespace

nlohmann::json value_model_config_json(const ModelConfig& cfg, DType dtype) {
  nlohmann::json j = cfg.to_json();
  j["architectures"] = nlohmann::json::array(
      {std::string(model_class_prefix(cfg.model_type)) + "ForSequenceClassification"});
  j["num_labels"] = 1;
  j["id2label"] = {{"0", "LABEL_0"}};
  j["label2id"] = {{"LABEL_0", 0}};
  const char* name = torch_dtype_name(dtype == DType::I32 ? DType::F32 : dtype);
  j["torch_dtype"] = name;
  if (j.contains("dtype")) j["dtype"] = name;  // newer transformers' spelling
  return j;
}

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j = {{"format", "streambp-trainer-state"},
          {"version", 1},
          {"step", step},
          {"total_steps", total_steps},
          {"epoch", epoch},
          {"micro_batches_done", micro_batches_done},
          {"epoch_rng_state", epoch_rng},
          {"tokens_seen", tokens_seen},
          {"skipped_steps", skipped_steps},
          {"ranks", ranks},
          {"config_hash", config_hash},
          {"data_files", data_files},
          {"config", config}};
  if (!rollouts.is_null()) j["rollouts"] = rollouts;
  return j;
}

namespace {

// trainer_state.json's fields, each read with its type and range checked and named in the error.
class StateReader {
 public:
  StateReader(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw InputError(where_ + ": \"" + field + "\" " + what);
  }
  const nlohmann::json& at(const char* field) const {
    auto it = j_.find(field);
    if (it == j_.end()) fail(field, "is missing");
    return *it;
  }
  // An integer in [lo, hi]; `fallback` when absent and given (fields older versions lack).
  int64_t integer(const char* field, int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback = std::nullopt) const {
    if (fallback && !j_.contains(field)) return *fallback;
    const nlohmann::json& v = at(field);
    if (!v.is_number_integer()) fail(field, "must be an integer, not " + v.dump());
    // A value past int64 parses as unsigned: compare before converting.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(field, "is " + v.dump() + ", outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      fail(field, "is " + std::to_string(x) + ", outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    return x;
  }
  std::array<uint64_t, 4> rng_state(const char* field) const {
    const nlohmann::json& v = at(field);
    if (!v.is_array() || v.size() != 4)
      fail(field, "must be a list of 4 unsigned 64-bit integers, not " + v.dump());
    std::array<uint64_t, 4> out{};
    for (size_t i = 0; i < 4; ++i) {
      if (!v[i].is_number_unsigned())  // nlohmann reads a non-negative integer as unsigned
        fail(field, "must be a list of 4 unsigned 64-bit integers, not " + v.dump());
      out[i] = v[i].get<uint64_t>();
    }
    return out;
  }
  std::string string(const char* field) const {
    const nlohmann::json& v = at(field);
    if (!v.is_string()) fail(field, "must be a string, not " + v.dump());
    return v.get<std::string>();
  }
  const nlohmann::json& object(const char* field) const {
    const nlohmann::json& v = at(field);
    if (!v.is_object()) fail(field, "must be an object");
    return v;
  }

 private:
  const nlohmann::json& j_;
  const std::string& where_;
};

}  // namespace

TrainerState TrainerState::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": a trainer state must be a JSON object");
  if (j.value("format", nlohmann::json()) != "streambp-trainer-state")
    throw InputError(where + ": not a streambp trainer_state.json");
  const StateReader r(j, where);
  if (r.integer("version", INT64_MIN, INT64_MAX) != 1)
    throw InputError(where + ": trainer state version " + j.at("version").dump() +
                     " is not supported");
  // Counters index the packing plan and size the schedule: trust none that is out of range.
  constexpr int64_t kMax = int64_t{1} << 53;  // what a JSON number holds exactly
  TrainerState s;
  s.total_steps = r.integer("total_steps", 1, kMax);
  s.step = r.integer("step", 0, kMax);
  s.epoch = r.integer("epoch", 0, kMax);
  s.micro_batches_done = r.integer("micro_batches_done", 0, kMax);
  s.epoch_rng = r.rng_state("epoch_rng_state");
  s.tokens_seen = r.integer("tokens_seen", 0, kMax);
  s.ranks = r.integer("ranks", 1, 1 << 20, 1);  // absent in older single-process checkpoints
  s.skipped_steps = r.integer("skipped_steps", 0, s.step, 0);  // absent before on_nonfinite
  s.config_hash = r.string("config_hash");
  s.data_files = r.object("data_files");
  s.config = r.object("config");
  if (j.contains("rollouts")) s.rollouts = r.object("rollouts");  // checked by its reader
  return s;
}

std::string save_checkpoint(const std::string& output_dir, const CheckpointContents& c,
                            Communicator& comm) {
  const bool lead = comm.rank() == 0;
  const std::string step = std::to_string(c.state.step);
  const fs::path final_dir = fs::path(output_dir) / (kStatePrefix + step);
  const fs::path staging = fs::path(output_dir) / (kStagingPrefix + step);
  std::error_code ec;
  auto cleanup = [&] {
    if (lead) fs::remove_all(staging, ec);
  };
  try {
    // Rank 0: the model directory, tokenizer files, master weights, the value model's files.
    on_every_rank(comm, final_dir.string(), [&] {
      if (!lead) return;
      fs::create_directories(output_dir, ec);
      if (ec) throw InputError(output_dir + ": cannot create output directory: " + ec.message());
      fs::remove_all(staging, ec);
      if (c.lora) {
        fs::create_directories(staging);
        save_lora_adapter(staging.string(), *c.lora, c.lora_base);
      } else {
        save_model_dir(staging.string(), c.cfg, c.weights, c.export_dtype);
      }
      for (const std::string& f : companion_files(c.tokenizer_dir, c.model_dir))
        copy_synced(f, staging / fs::path(f).filename());
      if (c.export_dtype != DType::F32 && !c.lora) write_master_weights(staging, c.weights);
      if (c.value_model)
        write_value_model(staging / kValueModelDir, *c.value_model, c.export_dtype);
    });
    // Every rank: its part of the optimizer state (one process, or zero 0: rank 0 all of it).
    on_every_rank(comm, final_dir.string(), [&] {
      c.optimizer(staging.string());
      if (c.value_model) c.value_model->optimizer((staging / kValueModelDir).string());
    });
    // Rank 0: trainer_state.json last, then the rename.
    on_every_rank(comm, final_dir.string(), [&] {
      if (!lead) return;
      if (c.value_model) fsync_directory((staging / kValueModelDir).string());
      write_synced(staging / "trainer_state.json", c.state.to_json().dump(2) + "\n");
      fsync_directory(staging.string());
      if (fs::exists(final_dir)) {
        // Saving a step again (e.g. a resumed run that is interrupted at once): the new copy wins.
        const fs::path old = fs::path(output_dir) / (std::string(".old-") + kStatePrefix + step);
        fs::remove_all(old, ec);
        fs::rename(final_dir, old);
        fs::rename(staging, final_dir);
        fs::remove_all(old, ec);
      } else {
        fs::rename(staging, final_dir);
      }
      fsync_directory(output_dir);
    });
  } catch (const fs::filesystem_error& e) {
    cleanup();
    throw InputError(final_dir.string() + ": cannot write checkpoint: " + e.what());
  } catch (...) {
    cleanup();
    throw;
  }
  return final_dir.string();
}

// Deleting a directory is not atomic: it is first renamed out of the checkpoint namespace, so
// that an interrupted deletion leaves a .old-checkpoint-<step> (removed at the next start), not
// a half-deleted checkpoint-<step>.
void delete_checkpoint(const fs::path& dir) {
  std::error_code ec;
  const fs::path doomed = dir.parent_path() / (".old-" + dir.filename().string());
  fs::remove_all(doomed, ec);
  fs::rename(dir, doomed, ec);
  fs::remove_all(ec ? dir : doomed, ec);
}

void rotate_checkpoints(const std::string& output_dir, int64_t keep_last) {
  if (keep_last <= 0) return;
  auto all = list_checkpoints(output_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i)
    delete_checkpoint(all[i].second);
}

void claim_output_dir(const std::string& output_dir, const std::string& metrics,
                      const std::string& resumed_from, bool overwrite, bool lead,
                      const std::vector<NamedPath>& inputs) {
  std::error_code ec;
  const bool fresh = resumed_from.empty();
  const bool same_dir =
      !fresh && fs::equivalent(fs::path(resumed_from).parent_path(), output_dir, ec);
  const int64_t from_step =
      fresh ? -1 : checkpoint_step(fs::path(resumed_from).filename().string());
  std::vector<fs::path> theirs;
  for (const auto& [step, path] : list_checkpoints(output_dir)) {
    if (!same_dir || step > from_step) theirs.push_back(path);
  }
  const bool metrics_taken =
      !same_dir && fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0;
  if (theirs.empty() && !metrics_taken) return;
  if (!overwrite) {
    std::string what;
    for (size_t i = 0; i < theirs.size() && i < 3; ++i)
      what += (i ? ", " : "") + theirs[i].filename().string();
    if (theirs.size() > 3) what += ", ...";
    if (metrics_taken) what += (what.empty() ? "" : ", ") + metrics;
    const std::string why =
        fresh ? "a previous run's files (" + what + "); resume it with --resume " + output_dir +
                    ", or choose another output_dir"
        : same_dir
            ? "checkpoints newer than " + fs::path(resumed_from).filename().string() + " (" + what +
                  "), from a run that continued past it; resume from the newest with "
                  "--resume " +
                  output_dir + ", or choose another output_dir"
            : "another run's files (" + what + "); choose another output_dir";
    throw InputError(output_dir + ": output_dir holds " + why +
                     ", or set overwrite_output_dir: true to delete them");
  }
  // Refused on every rank alike (each sees the same paths), before any rank deletes anything.
  std::vector<std::string> doomed;
  for (const fs::path& p : theirs) doomed.push_back(p.string());
  if (metrics_taken) doomed.push_back(metrics);
  for (const std::string& d : doomed)
    for (const NamedPath& in : inputs) {
      if (in.path.empty() || !fs::exists(in.path, ec) || !path_within(in.path, d)) continue;
      throw InputError("overwrite_output_dir: true would delete " + d + ", which " +
                       (path_within(d, in.path) ? "is " : "holds ") + in.name + " " + in.path +
                       " (an input of this run); move it out of output_dir " + output_dir +
                       " or choose another output_dir");
    }
  if (lead)
    for (const fs::path& p : theirs) delete_checkpoint(p);
}

void remove_stale_staging(const std::string& output_dir) {
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool incomplete = checkpoint_step(name) >= 0 && e.is_directory() &&
                            !fs::exists(e.path() / "trainer_state.json");
    if (name.starts_with(kStagingPrefix) ||
        name.starts_with(std::string(".old-") + kStatePrefix) || incomplete)
      stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

std::string resolve_resume_dir(const std::string& dir) {
  if (fs::exists(fs::path(dir) / "trainer_state.json")) return dir;
  if (!fs::is_directory(dir)) throw InputError(dir + ": resuming: no such directory");
  auto all = list_checkpoints(dir);
  if (all.empty())
    throw InputError(dir +
                     ": resuming: neither a checkpoint (no trainer_state.json) nor an output "
                     "directory with checkpoint-<step> subdirectories");
  return all.back().second.string();
}

TrainerState read_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  nlohmann::json j;
  try {
    j = parse_untrusted_json(read_input_file(path), path);
  } catch (const nlohmann::json::exception& e) {  // also out_of_range: 1e999
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  return TrainerState::from_json(j, path);
}

namespace {

// The fp32 weights a checkpoint directory holds: master_weights.safetensors when the export
// dtype was not fp32, else the model files themselves (`load`).
template <class Load>
void load_trained_weights(const fs::path& dir, const ModelConfig& cfg, ParameterSet& weights,
                          const char* what, Load load) {
  check_same_shape(dir.string(), cfg, what);
  const fs::path master = dir / "master_weights.safetensors";
  if (fs::exists(master)) {
    SafetensorsFile f(master.string());
    // Every tensor checked before any is copied: a NaN here would resume into NaN losses.
    for (size_t i = 0; i < weights.size(); ++i)
      check_weights_finite(f, weights.name(i), weights.tensor(i).numel());
    for (size_t i = 0; i < weights.size(); ++i) f.read_into(weights.name(i), weights.tensor(i));
  } else {
    load(dir.string());
  }
}

}  // namespace

void load_checkpoint_weights(const std::string& checkpoint_dir, const ModelConfig& cfg,
                             ParameterSet& weights) {
  load_trained_weights(checkpoint_dir, cfg, weights, "model",
                       [&](const std::string& d) { load_weights(d, cfg, weights); });
}

void load_value_checkpoint_weights(const std::string& checkpoint_dir, const ModelConfig& cfg,
                                   ParameterSet& weights) {
  const fs::path dir = fs::path(checkpoint_dir) / kValueModelDir;
  if (!fs::exists(dir / "config.json"))
    throw InputError(dir.string() + ": missing (the checkpoint holds no PPO value model)");
  load_trained_weights(dir, cfg, weights, "value model",
                       [&](const std::string& d) { load_value_weights(d, cfg, weights); });
}

DType model_storage_dtype(const std::string& model_dir, const ModelConfig& cfg) {
  const fs::path dir(model_dir);
  fs::path first;
  if (model_dir.empty()) {
    // randomly initialised: config.json's torch_dtype decides
  } else if (fs::exists(dir / "model.safetensors")) {
    first = dir / "model.safetensors";
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    const auto index = parse_untrusted_json_or_discarded(
        read_input_file((dir / "model.safetensors.index.json").string()));
    if (index.is_object() && index.contains("weight_map") && index["weight_map"].is_object() &&
        !index["weight_map"].empty() && index["weight_map"].begin()->is_string())
      first = dir / index["weight_map"].begin()->get<std::string>();
  }
  if (!first.empty() && fs::exists(first)) {
    SafetensorsFile f(first.string());
    for (const SafetensorsEntry& e : f.entries())
      if (e.dtype == DType::F32 || e.dtype == DType::BF16 || e.dtype == DType::F16) return e.dtype;
  }
  DType dt = DType::F32;
  if (parse_dtype(cfg.torch_dtype, &dt) && dt != DType::I32) return dt;
  return DType::F32;
}

nlohmann::json data_fingerprint(const DataSource& source) {
  const std::string& path = source.name;
  const std::unique_ptr<std::istream> stream = source.open("data file");
  std::istream& in = *stream;
  uint64_t h = 0xcbf29ce484222325ull;
  int64_t bytes = 0;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    const std::streamsize n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i)
      h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
    bytes += n;
  }
  return {{"path", path}, {"bytes", bytes}, {"fnv1a64", hex64(h)}};
}

}  // namespace sbp
