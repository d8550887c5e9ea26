#pragma once
// ZeRO-3's weights (docs/DISTRIBUTED.md): rank r keeps its slice of every tensor
// (optim/shard_range.h, the optimizer's slicing), and the engine's ParameterSet holds a whole
// tensor only while a pass reads it (engine/weight_hook.h). Acquiring a group binds a buffer of
// each tensor's whole shape (ledger category `weights`), places this rank's slice in it and
// all-gathers the others' (one non-blocking collective per tensor, in place); a prefetch issues
// the same gather early, so that the next layer's weights travel while this one computes; the
// release frees the buffers. So a rank holds P/R weights plus, while the engine walks the
// layers, the group it runs and the one being gathered.
//
// The slices are the trained values: AdamW updates them in place (DataParallel::update), and
// nothing needs gathering after an update. The gather is bit-exact: every rank receives the
// owners' elements unchanged (bf16 slices travel as fp32, which holds every bf16 exactly).
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "dist/grad_groups.h"
#include "engine/weight_hook.h"
#include "model/parameters.h"
#include "optim/shard_range.h"

namespace sbp {

class ShardedWeights final : public WeightHook {
 public:
  // `weights`: the engine's set, unallocated (ParameterSet::unallocated): its tensors are bound
  // here and only here. The slices are allocated (uninitialised) in `pool` as `dtype`.
  // `tied_lm_head`: the head's matrix is the embedding (acquiring the head acquires it).
  ShardedWeights(Communicator& comm, ParameterSet& weights, Pool& pool, Backend& be, DType dtype,
                 bool tied_lm_head);
  ShardedWeights(const ShardedWeights&) = delete;
  ShardedWeights& operator=(const ShardedWeights&) = delete;

  // (range(i).count) this rank's slice of tensor i, in the weights' dtype.
  Tensor slice(size_t i) const { return slices_[i].view(); }
  std::vector<Tensor> slices() const;
  const ShardRange& range(size_t i) const { return ranges_[i]; }
  size_t size() const { return slices_.size(); }
  // All-gathers issued since the counter was last reset (one per tensor per gather).
  int64_t gathers() const { return gathers_; }
  void reset_counters() { gathers_ = 0; }
  // Whether no tensor is bound or in flight (between passes).
  bool idle() const;

  void weights_acquire(GradGroup group, int64_t layer) override;
  void weights_prefetch(GradGroup group, int64_t layer) override;
  void weights_release(GradGroup group, int64_t layer) override;

 private:
  struct InFlight {
    Request request;
    std::vector<float> staged;  // the collective's host copy (memory MPI cannot address, bf16)
  };
  std::vector<size_t> tensors_of(GradGroup group, int64_t layer) const;
  void issue(size_t i);     // binds tensor i's whole buffer and starts its gather
  void complete(size_t i);  // waits for it

  Communicator& comm_;
  ParameterSet& w_;
  Pool& pool_;
  Backend& be_;
  GradGroups groups_;
  bool tied_;
  std::vector<ShardRange> ranges_;
  std::vector<std::vector<int64_t>> counts_;
  std::vector<Buffer> slices_;                   // per tensor: (range.count) this rank's slice
  std::vector<int> users_;                       // per tensor: acquires not yet released
  std::vector<std::optional<InFlight>> flight_;  // per tensor: its gather, while in flight
  int64_t gathers_ = 0;
};

}  // namespace sbp
