#pragma once
// One micro-batch's prepared batches (engine/prepared_batch.h), built on first use and kept
// for every later pass over the micro-batch: one per distinct model config, so the policy, the
// reference and a value model of the same shape (the usual case: value model = the policy's
// trunk with a value head) share a single one, and a reference or value model loaded with
// another vocabulary or rope gets its own. The tables live as long as this object, so the
// step runner holds it for exactly the passes over its micro-batch.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "core/pool.h"
#include "engine/prepared_batch.h"
#include "model/config.h"

namespace sbp {

class MicroBatchPrep {
 public:
  // `batch` must outlive this object; nothing is built until a model asks.
  MicroBatchPrep(const Batch& batch, Backend& be, Pool& pool)
      : batch_(&batch), be_(&be), pool_(&pool) {}

  // The prepared batch that serves a model of config `cfg`: one built before for an
  // equivalent config, else a new one.
  const PreparedBatch& for_model(const ModelConfig& cfg);

  const Batch& batch() const { return *batch_; }
  size_t built() const { return built_.size(); }
  // Frees the tables now (the micro-batch's passes are done); a later for_model builds anew.
  void release() { built_.clear(); }

 private:
  const Batch* batch_;
  Backend* be_;
  Pool* pool_;
  std::vector<std::unique_ptr<PreparedBatch>> built_;  // usually one
};

}  // namespace sbp
