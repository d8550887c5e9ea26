#pragma once
// `plan --time`: the planned step's ops (plan_at with an OpProfile) priced on a device
// (plan/time_model.h): the CPU measured now (plan/cpu_probe.h) or a GPU's datasheet profile
// (plan/gpu_profiles.h).
#include <string>

#include "plan/planner.h"
#include "plan/time_model.h"

namespace sbp {

struct TimePlan {
  DeviceProfile device;
  StepShape shape;
  OpProfile ops;  // the planned rank's step, every chunk
  PlannedStep step;
  StepTime time;
};

// The step of T tokens in `mode` (its chunk sizes as chosen: ChunkedPlan's layer_chunk and
// head_chunk) on `device`: "cpu" (probed now, with this process's threads) or a name
// gpu_profile knows.
TimePlan plan_time(const PlanSetup& setup, ExecConfig mode, int64_t seq_len,
                   const std::string& device);

// The same with a profile already made (tests; bench's CPU profile, probed once per shape).
TimePlan plan_time(const PlanSetup& setup, ExecConfig mode, int64_t seq_len,
                   const DeviceProfile& device);

// The StepShape of a planned step: tokens, ranks, model FLOPs, the optimizer's parameters.
StepShape step_shape(const PlanSetup& setup, const ExecConfig& mode, int64_t seq_len);

}  // namespace sbp
