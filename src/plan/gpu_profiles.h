#pragma once
// GPU device profiles for the time planner (plan/time_model.h), from the datasheets, with an
// efficiency per op family that no GPU has measured for this engine yet (docs/BENCHMARKS.md,
// "Time planner", lists every number and its source). scripts/gpu-check.sh prints measured
// steps beside these predictions; a measured profile replaces the assumptions once it has.
#include <string>
#include <vector>

#include "plan/time_model.h"

namespace sbp {

// "h100", "h200", "a100", "rtx4090"; throws InputError naming the known ones otherwise.
DeviceProfile gpu_profile(const std::string& name);
// The names gpu_profile knows, in the order docs list them.
std::vector<std::string> gpu_profile_names();

}  // namespace sbp
