#pragma once
// Shape-only execution of one training step: the real engine code against the meta backend
// and a non-materialising pool. Returns the ledger's view of the step, as a real run would
// record it, in a fraction of a second for any model size.
#include "core/ledger.h"
#include "engine/batch.h"
#include "engine/exec_config.h"
#include "model/config.h"

namespace sbp {

struct PlannedStep {
  int64_t peak_bytes = 0;
  MemoryBreakdown breakdown;  // at the peak
  int64_t flops = 0;
};

// Weights and gradients in `param_dtype` (the CPU trains in F32; a GPU run in BF16); with
// `adamw`, fp32 moments are counted too. Throws OutOfMemoryError past `budget` (> 0).
PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          DType param_dtype, bool adamw, int64_t budget = 0);

}  // namespace sbp
