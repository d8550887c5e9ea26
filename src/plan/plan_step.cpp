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
                          DType param_dtype, bool adamw, int64_t budget) {
  Ledger ledger(budget);
  Pool pool(ledger, PoolOptions{.materialize = false});
  MetaBackend be;
  ParameterSet weights(cfg, pool, Category::weights, param_dtype, false);
  ParameterSet grads(cfg, pool, Category::grads, param_dtype, true);
  std::unique_ptr<AdamW> opt;
  if (adamw) opt = std::make_unique<AdamW>(cfg, pool, AdamWConfig{});
  Engine engine(cfg, weights, be, pool, exec);
  SftObjective objective(batch, batch.loss_weight_sum());
  engine.forward_backward(batch, objective, grads);
  PlannedStep p;
  p.peak_bytes = ledger.peak();
  p.breakdown = ledger.peak_breakdown();
  p.flops = be.flops();
  return p;
}

}  // namespace sbp
