#include "cli/run_config.h"

#include "core/error.h"
#include "train/checkpoint.h"

namespace sbp::cli {

TrainConfig load_run_config(const std::vector<std::string>& positional, const std::string& resume) {
  std::string config;
  std::vector<std::string> overrides = positional;
  if (!overrides.empty() && overrides.front().find('=') == std::string::npos) {
    config = overrides.front();
    overrides.erase(overrides.begin());
  }
  for (const std::string& o : overrides) {
    if (o.find('=') == std::string::npos)
      throw InputError("train: unexpected argument '" + o +
                       "' (expected CONFIG.yaml then key=value overrides)");
  }
  if (!config.empty()) return load_train_config(config, overrides);
  if (!resume.empty()) {
    const std::string ckpt = resolve_resume_dir(resume);
    const TrainerState state = read_trainer_state(ckpt);
    return train_config_from_json(state.config, ckpt + "/trainer_state.json", overrides);
  }
  throw InputError("train: key=value overrides need a CONFIG.yaml (or --resume DIR)");
}

}  // namespace sbp::cli
