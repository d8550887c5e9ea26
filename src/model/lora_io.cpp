#include "model/lora_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/untrusted_json.h"
#include "core/memory.h"
#include "core/output_file.h"
#include "model/safetensors.h"

namespace sbp {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* kConfigFile = "adapter_config.json";
const char* kWeightsFile = "adapter_model.safetensors";

// Fields whose PEFT default is the only value we implement: (field, accepted values).
void refuse_unless(const json& j, const std::string& path, const char* field,
                   const std::vector<json>& accepted) {
  if (!j.contains(field)) return;
  const json& v = j.at(field);
  for (const json& a : accepted)
    if (v == a) return;
  throw InputError(path + ": " + field + " = " + v.dump() +
                   " is not supported (streambp's LoRA implements " + accepted.front().dump() +
                   " only)");
}

}  // namespace

LoraConfig read_lora_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / kConfigFile).string();
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open (not a PEFT adapter directory?)");
  json j;
  try {
    j = parse_untrusted_json(in, path);
  } catch (const json::exception& e) {
    throw InputError(path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(path + ": not a JSON object");
  try {
    if (j.value("peft_type", std::string("LORA")) != "LORA")
      throw InputError(path + ": peft_type " + j.at("peft_type").dump() + " is not LORA");
    refuse_unless(j, path, "bias", {"none"});
    refuse_unless(j, path, "use_dora", {false});
    refuse_unless(j, path, "fan_in_fan_out", {false});
    refuse_unless(j, path, "modules_to_save", {nullptr, json::array()});
    refuse_unless(j, path, "layers_to_transform", {nullptr});
    refuse_unless(j, path, "rank_pattern", {json::object(), nullptr});
    refuse_unless(j, path, "alpha_pattern", {json::object(), nullptr});
    refuse_unless(j, path, "lora_bias", {false});
    refuse_unless(j, path, "use_qalora", {false});
    refuse_unless(j, path, "exclude_modules", {nullptr});
    refuse_unless(j, path, "layer_replication", {nullptr});
    refuse_unless(j, path, "target_parameters", {nullptr});
    refuse_unless(j, path, "trainable_token_indices", {nullptr});
    refuse_unless(j, path, "alora_invocation_tokens", {nullptr});
    LoraConfig c;
    // Every number is checked where it is read: a fractional r would be truncated by
    // get<int64_t>(); the ranges are LoraConfig::validate()'s (below).
    const json& r = j.at("r");
    if (!r.is_number_integer())
      throw InputError(path + ": r = " + r.dump() + " must be a positive integer");
    // Past int64 (stored unsigned) it is out of any range; the bounds are validate()'s.
    if (r.is_number_unsigned() && r.get<uint64_t>() > uint64_t{1} << 62)
      throw InputError(path + ": r = " + r.dump() + " is out of range");
    c.r = r.get<int64_t>();
    if (j.contains("lora_alpha") && !j.at("lora_alpha").is_number())
      throw InputError(path + ": lora_alpha = " + j.at("lora_alpha").dump() + " is not a number");
    c.alpha = j.value("lora_alpha", 8.0);  // PEFT's default lora_alpha
    c.dropout = j.value("lora_dropout", 0.0);
    c.use_rslora = j.value("use_rslora", false);
    const json& t = j.at("target_modules");
    c.target_modules.clear();
    if (t.is_string())
      c.target_modules = parse_lora_targets(t.get<std::string>());
    else
      for (const json& m : t) {
        // PEFT matches a name by its suffix and writes all-linear resolved to full module
        // paths ("model.layers.0.mlp.down_proj"): the projection is the last component. A
        // subset of layers shows up when the weights are loaded (missing tensors).
        std::string name = m.get<std::string>();
        name = name.substr(name.rfind('.') == std::string::npos ? 0 : name.rfind('.') + 1);
        if (std::find(c.target_modules.begin(), c.target_modules.end(), name) ==
            c.target_modules.end())
          c.target_modules.push_back(name);
      }
    // An adapter trained with dropout is used without it (inference, or training resumed):
    // accept the file, train without dropout.
    c.dropout = 0.0;
    c.validate();
    return c;
  } catch (const json::exception& e) {
    throw InputError(path + ": " + e.what());
  } catch (const InputError& e) {
    const std::string what = e.what();
    if (what.starts_with(path)) throw;
    throw InputError(path + ": " + what);
  }
}

void load_lora_weights(const std::string& dir, const LoraSet& lora) {
  const std::string path = (fs::path(dir) / kWeightsFile).string();
  if (!fs::exists(path)) throw InputError(path + ": missing (adapter weights)");
  const SafetensorsFile file(path);
  for (const SafetensorsEntry& e : file.entries())
    if (!lora.contains(e.name))
      throw InputError(path + ": unexpected tensor " + e.name +
                       " (not an adapter of the configured target modules)");
  std::vector<float> host;
  for (size_t i = 0; i < lora.size(); ++i) {
    const Tensor& t = lora.tensor(i);
    const SafetensorsEntry* e = file.find(lora.name(i));
    if (!e) throw InputError(path + ": missing tensor " + lora.name(i));
    if (!(e->shape == t.shape))
      throw InputError(path + ": " + lora.name(i) + " has shape " + e->shape.str() +
                       ", the model needs " + t.shape.str());
    host.resize(static_cast<size_t>(t.numel()));
    file.read_into(lora.name(i), Tensor(host.data(), DType::F32, t.shape));
    // A non-finite adapter weight makes every loss and logit NaN (generate returned token 0,
    // score "loss nan", merge wrote NaN weights), as a base weight would: refused alike.
    for (size_t k = 0; k < host.size(); ++k)
      if (!std::isfinite(host[k]))
        throw InputError(path + ": tensor '" + lora.name(i) + "' element " + std::to_string(k) +
                         " is " + (std::isnan(host[k]) ? "nan" : "infinite") +
                         " (adapter weights must be finite)");
    if (t.data) upload_f32(t, host);
  }
}

void save_lora_adapter(const std::string& dir, const LoraSet& lora, const std::string& base_model) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create directory: " + ec.message());
  const LoraConfig& c = lora.config();
  // target_modules as PEFT writes them once resolved: the module names, all-linear expanded.
  json targets = json::array();
  for (int p = 0; p < kLoraTargets; ++p)
    if (c.targets(static_cast<LoraTarget>(p)))
      targets.push_back(lora_target_name(static_cast<LoraTarget>(p)));
  const json j = {{"peft_type", "LORA"},
                  {"task_type", "CAUSAL_LM"},
                  {"base_model_name_or_path", base_model},
                  {"r", c.r},
                  {"lora_alpha", c.alpha},
                  {"lora_dropout", c.dropout},
                  {"use_rslora", c.use_rslora},
                  {"target_modules", targets},
                  {"bias", "none"},
                  {"fan_in_fan_out", false},
                  {"init_lora_weights", true},
                  {"inference_mode", true},
                  {"use_dora", false},
                  {"modules_to_save", nullptr},
                  {"layers_to_transform", nullptr},
                  {"layers_pattern", nullptr},
                  {"rank_pattern", json::object()},
                  {"alpha_pattern", json::object()},
                  {"revision", nullptr}};
  // Adapters are small: each goes to the host whole, F32.
  std::vector<std::vector<float>> host;
  std::vector<NamedTensor> tensors;
  host.reserve(lora.size());
  for (size_t i = 0; i < lora.size(); ++i) {
    host.push_back(download_f32(lora.tensor(i)));
    tensors.push_back({lora.name(i), Tensor(host.back().data(), DType::F32, lora.tensor(i).shape)});
  }
  write_safetensors((fs::path(dir) / kWeightsFile).string(), tensors, DType::F32);
  write_file_atomically((fs::path(dir) / kConfigFile).string(), j.dump(2) + "\n");
}

}  // namespace sbp
