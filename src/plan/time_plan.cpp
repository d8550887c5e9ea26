#include "plan/time_plan.h"

#include <algorithm>

#include "plan/cpu_probe.h"
#include "plan/gpu_profiles.h"

namespace sbp {

StepShape step_shape(const PlanSetup& setup, const ExecConfig& mode, int64_t seq_len) {
  StepShape s;
  s.tokens = seq_len;
  s.ranks = setup.ranks;
  s.context_parallel = setup.context_parallel;
  const StepBatches b = planning_step(setup.objective.kind, setup.group_size, seq_len);
  const ModelFlops f = model_flops(setup.cfg, b.micro.front().batch.seq_lens);
  s.model_flops_raw = f.raw;
  s.model_flops_causal = f.causal;
  if (setup.adamw && !setup.lora.enabled()) {
    // ZeRO 1 and 2 divide the optimizer's state (and so its update) among the ranks.
    const int64_t p = setup.cfg.num_parameters();
    s.optimizer_params = setup.zero >= 1 ? (p + setup.ranks - 1) / setup.ranks : p;
  }
  s.optimizer_on_host = mode.offload.optimizer;
  s.param_dtype = setup.param_dtype;
  s.layers = setup.cfg.num_hidden_layers;
  return s;
}

TimePlan plan_time(const PlanSetup& setup, ExecConfig mode, int64_t seq_len,
                   const DeviceProfile& device) {
  TimePlan t;
  t.device = device;
  t.step = plan_at(setup, mode, seq_len, &t.ops);
  t.shape = step_shape(setup, mode, seq_len);
  t.time = predict_step_time(t.ops, t.step, t.device, t.shape);
  return t;
}

TimePlan plan_time(const PlanSetup& setup, ExecConfig mode, int64_t seq_len,
                   const std::string& device) {
  if (device != "cpu") return plan_time(setup, mode, seq_len, gpu_profile(device));
  // The CPU: the step's ops first, then probes of their shapes.
  TimePlan t;
  t.step = plan_at(setup, mode, seq_len, &t.ops);
  t.shape = step_shape(setup, mode, seq_len);
  const int64_t rows = seq_len / std::max(setup.context_parallel, 1);
  t.device = probe_cpu_profile(
      t.ops, setup.cfg,
      CpuProbeShape{.act_dtype = setup.act_dtype,
                    // A chunk's size, at most 4096 rows (a rate no longer grows past it).
                    .rows = std::min<int64_t>(mode.layer_chunk_for(rows), 4096),
                    .head_rows = std::min<int64_t>(mode.head_chunk_for(rows), 4096),
                    .keys = std::min<int64_t>(seq_len, 4096)});
  t.time = predict_step_time(t.ops, t.step, t.device, t.shape);
  return t;
}

}  // namespace sbp
