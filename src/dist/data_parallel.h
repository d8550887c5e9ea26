#pragma once
// One trained model's gradients and optimizer under data parallelism (docs/DISTRIBUTED.md).
// Every rank holds the full fp32 weights and runs its own micro-batches; gradients are reduced
// across ranks once per layer, right after the layer's chunk loop (engine/grad_hook.h), with
// non-blocking collectives that run while the next layer's backward computes.
//
//   zero 0   whole gradients on every rank, all-reduced; every rank runs the whole AdamW
//   zero 1   whole gradient buffers, reduce-scattered: rank r keeps the sum of its slice of
//            each tensor (optim/shard_range.h); AdamW moments only for that slice
//            (ShardedAdamW); the updated slices are all-gathered into every rank's weights
//   zero 2   as 1, but a group's gradient buffers exist only while the backward writes them and
//            their reduce-scatter runs: the group's buffers are bound just before the group's
//            backward and released when its reduction completes (at the latest when the next
//            group's reduction is issued); only the slices persist
//
// When reductions run: zero 0/1 reduce in the step's last micro-batch slot only (the sum of the
// local micro-batches is reduced once: one collective per tensor per step, whatever grad_accum);
// zero 2 reduces in every slot, since there is no whole buffer to accumulate into between
// micro-batches (one collective per tensor per micro-batch; the slices accumulate).
//
// A step has the same number of micro-batch slots on every rank (ceil(step / ranks)); a rank with
// no micro-batch for its last slot calls empty_slot(), which replays the engine's events on its
// gradients, so that every rank issues the same collectives in the same order.
//
// With one rank all of this is the single-process path: whole gradients, AdamW, no hook.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "dist/grad_groups.h"
#include "engine/grad_hook.h"
#include "model/config.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/sharded_adamw.h"

namespace sbp {

class DataParallel : private GradHook {
 public:
  // `optim` null: no optimizer (shape-only planning without one). `grad_dtype`: F32 (the
  // default) or BF16 gradient buffers. `master`: the optimizer keeps fp32 master weights (for
  // bf16 weights; AdamW, ShardedAdamW).
  DataParallel(Communicator& comm, int zero, const ModelConfig& cfg, ModelHead head, Pool& pool,
               Backend& be, const AdamWConfig* optim, DType grad_dtype = DType::F32,
               bool master = false);
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Whole gradient views for forward_backward (with zero 2 bound only inside a backward).
  const ParameterSet& grads() const { return grads_; }
  bool distributed() const { return comm_.size() > 1; }
  int zero() const { return zero_; }  // 0 with one rank, whatever was asked

  // ---- one optimizer step ----
  void begin_step(int64_t slots);  // zeroes the gradients; each rank runs `slots` slots
  GradHook* hook(int64_t slot);    // for that slot's forward_backward (null: nothing to do)
  void end_slot(int64_t slot);     // after it: completes the slot's reductions
  void empty_slot(int64_t slot);   // a slot this rank has no micro-batch for
  // The global gradient norm before clipping (the one device wait); with several ranks every
  // rank returns the same value. = norm_of(sum of sum_squares of norm_parts()), the parts this
  // rank squares, so that a caller can measure two models with one wait.
  double grad_norm();
  std::vector<Tensor> norm_parts() const;
  double norm_of(double local_sum_squares);
  // Scales the gradients by clip_factor(max_norm, norm) (optim/adamw.h): queued work only.
  void clip_to(double max_norm, double norm);
  // AdamW with the reduced gradients; with zero 1/2 on this rank's slices, then all-gathered.
  void update(const ParameterSet& weights, float lr);

  // ---- checkpoints (optim/optimizer_files.h) ----
  // This rank's part: zero 0 (or one rank): rank 0 writes optimizer.safetensors; zero 1/2:
  // every rank writes its shard file.
  void save_optimizer(const std::string& dir) const;
  void load_optimizer(const std::string& dir);  // from either form, any saved rank count
  AdamW& adamw();                               // zero 0 only
  // The fp32 master weights of an optimizer that keeps them (zero 0), else null.
  ParameterSet* master();
  int64_t optimizer_steps() const;

  // Collectives of the current step (metrics and tests: one reduction per tensor per step
  // with zero 0/1, per tensor per slot with zero 2; never per chunk).
  struct Counters {
    int64_t reductions = 0;     // reduce collectives issued (one per tensor)
    int64_t reduced_bytes = 0;  // bytes of the tensors they reduced
    int64_t gathers = 0;        // weight all-gathers (zero 1/2)
    // Reductions found complete by the test at a later group's boundary, i.e. finished while
    // later layers computed, before anything waited for them (timing-dependent: evidence of
    // overlap, not a promise).
    int64_t done_during_backward = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Pending {
    Request request;
    size_t tensor = 0;
    bool done = false;  // a test found it complete
    // Memory a communicator cannot address (the checking backend's; a GPU's until NCCL): the
    // collective works on this host copy, uploaded back when it completes.
    std::vector<float> staged;
  };
  void grads_begin(GradGroup group, int64_t layer) override;
  void grads_final(GradGroup group, int64_t layer) override;
  bool reduces(int64_t slot) const;
  void progress();
  void complete_oldest_group();
  void complete_all();
  Tensor owned_grad(size_t i) const;  // this rank's reduced slice of tensor i
  // Zero 1: moves the reduced slice from the front of gradient g to its place r.
  void move_front_to_slice(const Tensor& g, const ShardRange& r);

  Communicator& comm_;
  int zero_;
  Pool& pool_;
  Backend& be_;
  DType grad_dtype_;
  bool tied_lm_head_;
  ParameterSet grads_;
  GradGroups groups_;
  std::vector<ShardRange> ranges_;               // per tensor: this rank's slice
  std::vector<std::vector<int64_t>> counts_;     // per tensor: every rank's slice size
  std::vector<Buffer> shards_;                   // zero 2: per tensor, the reduced slice
  std::unique_ptr<AdamW> adamw_;                 // zero 0
  std::unique_ptr<ShardedAdamW> sharded_;        // zero 1/2
  std::vector<std::vector<Pending>> in_flight_;  // reductions by group, oldest first
  int64_t slots_ = 0;
  Counters counters_;
};

}  // namespace sbp
