#include "model/value_model_io.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "model/checkpoint_io.h"
#include "model/safetensors.h"

namespace sbp {

namespace fs = std::filesystem;

ParameterSet make_value_parameters(const ModelConfig& cfg, Pool& pool, Category category,
                                   DType dtype, bool zero) {
  return ParameterSet(cfg, pool, category, dtype, zero, ModelHead::value);
}

namespace {

// A value checkpoint's files, opened, with the file that holds each tensor.
struct ValueCheckpoint {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;
};

// Opens model.safetensors (or the shards of its index) and validates every tensor's presence
// and shape against `cfg` before anything is copied.
ValueCheckpoint open_value_checkpoint(const std::string& dir, const ModelConfig& cfg,
                                      bool init_missing_head) {
  ValueCheckpoint ck;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> names;
  if (fs::exists(single)) {
    names.push_back(single.string());
  } else if (fs::exists(index)) {
    nlohmann::json j;
    try {
      check_input_file(index);
      std::ifstream in(index);
      j = parse_untrusted_json(in, index.string());
    } catch (const InputError&) {  // names the file already
      throw;
    } catch (const std::exception& e) {
      throw InputError(index.string() + ": " + e.what());
    }
    std::map<std::string, bool> seen;
    for (const auto& [tensor, shard] : j.at("weight_map").items()) {
      const std::string f = (fs::path(dir) / shard.get<std::string>()).string();
      if (!seen[f]) names.push_back(f);
      seen[f] = true;
    }
  } else {
    throw InputError(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const std::string& f : names) {
    ck.files.push_back(std::make_unique<SafetensorsFile>(f));
    for (const SafetensorsEntry& e : ck.files.back()->entries())
      ck.where[e.name] = ck.files.back().get();
  }
  for (const ParamSpec& s : parameter_specs(cfg, ModelHead::value)) {
    auto it = ck.where.find(s.name);
    if (it == ck.where.end()) {
      if (s.name == "score.weight" && init_missing_head) continue;
      throw InputError(dir + ": tensor '" + s.name + "' (shape " + s.shape.str() +
                       ") is missing from the value model checkpoint");
    }
    const SafetensorsEntry* e = it->second->find(s.name);
    if (e->shape != s.shape)
      throw InputError(it->second->path() + ": tensor '" + s.name + "' has shape " +
                       e->shape.str() + " but config.json implies " + s.shape.str());
  }
  return ck;
}

}  // namespace

void check_value_weights(const std::string& dir, const ModelConfig& cfg, bool init_missing_head) {
  open_value_checkpoint(dir, cfg, init_missing_head);
}

void load_value_weights(const std::string& dir, const ModelConfig& cfg, ParameterSet& params,
                        bool init_missing_head, uint64_t seed, float head_std) {
  SBP_CHECK(params.head() == ModelHead::value, "load_value_weights: not a value-model set");
  const ValueCheckpoint ck = open_value_checkpoint(dir, cfg, init_missing_head);
  // Every weight finite before anything is copied, as load_weights checks the policy's: a NaN
  // in the value model made every value, advantage and loss NaN.
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    auto it = ck.where.find(params.name(i));
    if (t.data && it != ck.where.end()) check_weights_finite(*it->second, params.name(i), t.numel());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = params.tensor(i);
    if (!t.data) continue;
    auto it = ck.where.find(params.name(i));
    if (it != ck.where.end()) {
      it->second->read_into(params.name(i), t);
      continue;
    }
    Rng rng(seed, params.name(i));  // the missing head, as init_parameters would draw it
    std::vector<float> head(static_cast<size_t>(t.numel()));
    for (float& x : head) x = head_std * rng.normal();
    upload_f32(t, head);
  }
}

}  // namespace sbp
