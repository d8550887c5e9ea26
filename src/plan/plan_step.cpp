#include "plan/plan_step.h"

#include <memory>
#include <vector>

#include "backend/meta/meta_backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"
#include "engine/engine.h"
#include "model/parameters.h"
#include "objective/sft.h"
#include "optim/adamw.h"
#include "optim/shard_range.h"

namespace sbp {

PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          const StepMemoryOptions& mem) {
  Ledger ledger(mem.budget);
  Pool pool(ledger, PoolOptions{.materialize = false});
  MetaBackend be;
  ShapeOnlyCommunicator comm(0, mem.ranks);
  ParameterSet weights(cfg, pool, Category::weights, mem.param_dtype, false);
  // Gradients, then the master copy and the moments, as the trainer allocates them.
  const AdamWConfig optim;
  DataParallel parallel(comm, mem.zero, cfg, ModelHead::lm, pool, be, mem.adamw ? &optim : nullptr, mem.param_dtype);
  std::vector<Buffer> master;  // fp32 master weights: whole, or with ZeRO-1/2 this rank's slices
  if (mem.adamw && mem.master_weights && mem.param_dtype != DType::F32) {
    for (const ParamSpec& s : parameter_specs(cfg)) {
      const int64_t n = s.shape.numel();
      const int64_t held = parallel.zero() == 0 ? n : shard_range(n, mem.ranks, 0).count;
      master.push_back(pool.allocate(Category::optimizer, DType::F32, {held}));
    }
  }
  Engine engine(cfg, weights, be, pool, exec);
  SftObjective objective(batch, batch.loss_weight_sum());
  parallel.begin_step(1);
  engine.forward_backward(batch, objective, parallel.grads(), parallel.hook(0));
  parallel.end_slot(0);
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
