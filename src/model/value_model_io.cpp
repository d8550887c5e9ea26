#include "model/value_model_io.h"

#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
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

// Opens model.safetensors (or the index and its shards, cross-checked as the policy's are) and
// validates every tensor's presence and shape against `cfg` before anything is copied. Besides
// the value model's tensors a directory may hold the policy's head (a value model started from
// a policy checkpoint) and what transformers ignores; any other tensor is refused.
ModelFiles open_value_checkpoint(const std::string& dir, const ModelConfig& cfg,
                                 bool init_missing_head) {
  ModelFiles ck = open_model_files(dir);
  std::set<std::string> known;
  for (const ModelHead head : {ModelHead::value, ModelHead::lm})
    for (const ParamSpec& s : parameter_specs(cfg, head)) known.insert(s.name);
  const std::string lm_head = hf_name(model_param(ParamRole::lm_head), norm_layout(cfg));
  for (const auto& [name, file] : ck.where) {
    if (!known.count(name) && !ignorable_tensor(name) && name != lm_head)
      throw InputError(file->path() + ": unexpected tensor '" + name +
                       "' (not a parameter of this value model's config)");
  }
  for (const ParamSpec& s : parameter_specs(cfg, ModelHead::value)) {
    auto it = ck.where.find(s.name);
    if (it == ck.where.end()) {
      if (s.id.role == ParamRole::score && init_missing_head) continue;
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
  const ModelFiles ck = open_value_checkpoint(dir, cfg, init_missing_head);
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
