#include "cli/model_source.h"

#include <filesystem>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "model/checkpoint_io.h"

namespace sbp::cli {

namespace fs = std::filesystem;

std::unique_ptr<Backend> backend_from_flag(const std::string& name) {
  try {
    return make_backend(parse_backend(name));
  } catch (const InputError& e) {
    throw InputError(std::string("--backend: ") + e.what());
  }
}

Precision precision_from_flag(const std::string& name) {
  Precision p{};
  if (!try_parse_enum<Precision>(kPrecisionNames, name, &p))
    throw InputError("--precision: unknown precision '" + name + "' (use " +
                     enum_choices<Precision>(kPrecisionNames) + ")");
  return p;
}

std::vector<Precision> precisions_from_flag(const std::string& list) {
  std::vector<Precision> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(precision_from_flag(list.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

ModelSource resolve_model(const std::string& arg, int64_t layers) {
  ModelSource src;
  src.cfg = resolve_config(arg);
  if (fs::is_directory(arg)) {
    src.dir = arg;
    src.has_weights = fs::exists(fs::path(arg) / "model.safetensors") ||
                      fs::exists(fs::path(arg) / "model.safetensors.index.json");
  }
  if (layers > 0) {
    if (src.has_weights)
      throw InputError("--layers cannot change a checkpoint with weights (" + arg + ")");
    src.cfg.set_num_layers(layers);
    src.cfg.validate("--layers");  // the override is bounded like the config's own value
  }
  return src;
}

ParameterSet materialize_weights(const ModelSource& src, Pool& pool, uint64_t seed,
                                 InitStyle style, DType dtype) {
  ParameterSet w(src.cfg, pool, Category::weights, dtype, false);
  fill_weights(src, w, seed, style);
  return w;
}

void fill_weights(const ModelSource& src, ParameterSet& w, uint64_t seed, InitStyle style) {
  if (src.has_weights) {
    load_weights(src.dir, src.cfg, w);
  } else {
    init_parameters(w, seed, style);
  }
}

}  // namespace sbp::cli
