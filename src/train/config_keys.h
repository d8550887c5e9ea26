#pragma once
// The trainer's configuration keys (docs/TRAINING.md), one row each (train/config_key.h), in the
// order the documentation and every error's list of known keys have them: the run's inputs and
// data, `objective` and every objective's keys (the setting rows of its own file, and an online
// objective's rollout keys), then execution, optimizer, loop, distribution, LoRA and the demo.
#include <string>
#include <vector>

#include "objective/objective_traits.h"
#include "train/config_key.h"

namespace sbp {

const std::vector<ConfigKey>& config_keys();
const ConfigKey* find_config_key(const std::string& name);  // null: no such key

// The objectives in the order their sections have in the key table, and so in every list of
// keys an error prints: the offline ones, then the online ones, each in registry order.
std::vector<const ObjectiveTraits*> objectives_in_key_order();

}  // namespace sbp
