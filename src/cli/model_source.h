#pragma once
// Resolving a --model argument: a Hugging Face directory (config.json + safetensors), a
// config.json file, or a built-in preset. Files and presets get random weights from --seed.
#include <cstdint>
#include <string>

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/parameters.h"

namespace sbp::cli {

struct ModelSource {
  ModelConfig cfg;
  bool has_weights = false;  // a directory with safetensors (else random init)
  std::string dir;           // the directory, if any
};

// The backend --backend names ("cpu"); InputError naming the flag for an unknown one.
std::unique_ptr<Backend> backend_from_flag(const std::string& name);

// --precision: "fp32" or "bf16"; a comma-separated list for the commands that compare them.
// InputError naming the flag for anything else.
Precision precision_from_flag(const std::string& name);
std::vector<Precision> precisions_from_flag(const std::string& list);

// Reads the config (and decides whether weights exist); `layers` > 0 overrides the layer
// count (only for configs and presets, whose weights are random anyway).
ModelSource resolve_model(const std::string& arg, int64_t layers = 0);

// Allocates the weights in `pool` (category weights, `dtype`: a bf16 checkpoint loads into bf16
// as it is) and loads or initialises them.
ParameterSet materialize_weights(const ModelSource& src, Pool& pool, uint64_t seed,
                                 InitStyle style = InitStyle::hf, DType dtype = DType::F32);
// Loads or initialises weights allocated elsewhere (a ModelSet's).
void fill_weights(const ModelSource& src, ParameterSet& w, uint64_t seed,
                  InitStyle style = InitStyle::hf);

}  // namespace sbp::cli
