#include "plan/plan_step.h"

#include <memory>

#include "backend/meta/meta_backend.h"
#include "core/pool.h"
#include "engine/engine.h"
#include "model/parameters.h"
#include "objective/sft.h"
#include "optim/adamw.h"

namespace sbp {

PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          const StepMemoryOptions& mem) {
  Ledger ledger(mem.budget);
  Pool pool(ledger, PoolOptions{.materialize = false});
  MetaBackend be;
  ParameterSet weights(cfg, pool, Category::weights, mem.param_dtype, false);
  ParameterSet grads(cfg, pool, Category::grads, mem.param_dtype, true);
  ParameterSet master;
  std::unique_ptr<AdamW> opt;
  if (mem.adamw) {
    if (mem.master_weights && mem.param_dtype != DType::F32)
      master = ParameterSet(cfg, pool, Category::optimizer, DType::F32, false);
    opt = std::make_unique<AdamW>(cfg, pool, AdamWConfig{});
  }
  Engine engine(cfg, weights, be, pool, exec);
  SftObjective objective(batch, batch.loss_weight_sum());
  engine.forward_backward(batch, objective, grads);
  PlannedStep p;
  p.peak_bytes = ledger.peak();
  p.breakdown = ledger.peak_breakdown();
  p.flops = be.flops();
  return p;
}

PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          DType param_dtype, bool adamw, int64_t budget) {
  return plan_sft_step(
      cfg, exec, batch,
      StepMemoryOptions{
          .param_dtype = param_dtype, .adamw = adamw, .master_weights = false, .budget = budget});
}

}  // namespace sbp
