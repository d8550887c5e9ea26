#include "step/micro_batch_prep.h"

namespace sbp {

const PreparedBatch& MicroBatchPrep::for_model(const ModelConfig& cfg) {
  for (const std::unique_ptr<PreparedBatch>& p : built_)
    if (p->serves(cfg, *be_, *pool_)) return *p;
  built_.push_back(std::make_unique<PreparedBatch>(cfg, *be_, *pool_, *batch_));
  return *built_.back();
}

}  // namespace sbp
