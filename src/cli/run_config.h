#pragma once
// The configuration of `streambp train CONFIG.yaml [key=value ...] [--resume DIR]`: shared by the
// command and the Python package's train() (python/src/).
#include <string>
#include <vector>

#include "train/train_config.h"

namespace sbp::cli {

// `positional`: CONFIG.yaml first (optional), then key=value overrides; without a config, the
// checkpoint's own config (`resume`: a checkpoint or output directory). InputError otherwise.
TrainConfig load_run_config(const std::vector<std::string>& positional, const std::string& resume);

}  // namespace sbp::cli
