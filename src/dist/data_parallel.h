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
//   zero 3   as 2, and the weights too are only this rank's slices (dist/sharded_weights.h):
//            the engine's weights are bound a group at a time, all-gathered just before the
//            engine reads them (the next group's gather issued while one computes) and freed
//            after; AdamW updates the slices in place, so nothing is gathered after the update.
//            The model set builds the weights unallocated and calls shard_weights().
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
//
// offload: optimizer (engine/exec_config.h). The optimizer lives in host memory (the pool's
// host pool, Backend::host_memory): AdamW's moments, its fp32 master weights, a copy of the
// weights in their own dtype (the image the update writes and the device weights are copied
// from), and the gradient sums. A group's gradient buffers exist on the device only while the
// backward writes them, as with zero 2, in every zero stage and with one process:
//   - grads_begin binds them: zeros in the step's first slot (and in every slot with zero 2),
//     else the host's sum so far copied back, so that the device adds the slot's gradient to
//     it in the order (and to the bits) the device-resident sum would;
//   - grads_final copies them to the host (Backend::offload_async), or, in a slot that
//     reduces, issues the reduction and copies this rank's reduced part when it completes;
//   - they are released when the copy is waited for, at the next group's grads_final, so a
//     group's copy runs while the next group's backward computes, and at most two groups'
//     buffers exist at once.
// At the step's end the norm, the clipping and the AdamW update run on the host (HostMath: the
// CPU backend's kernels, the same bits), the updated slices are all-gathered on the host with
// zero 1/2, and the weights copied to the device. The optimizer files are the same files.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/host_math.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "dist/grad_groups.h"
#include "dist/sharded_weights.h"
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
  // `offload`: the optimizer in host memory (above; needs pool.host()), with the device
  // weights' dtype `param_dtype` for the host's copy of them.
  DataParallel(Communicator& comm, int zero, const ModelConfig& cfg, ModelHead head, Pool& pool,
               Backend& be, const AdamWConfig* optim, DType grad_dtype = DType::F32,
               bool master = false, bool offload = false, DType param_dtype = DType::F32);
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Zero 3: `weights` (unallocated) become this rank's slices, bound per group through
  // weight_hook(); `dtype` the weights' dtype.
  void shard_weights(ParameterSet& weights, DType dtype);
  // Zero 3: what the engine calls around each group (engine/weight_hook.h); else null.
  WeightHook* weight_hook() { return sharded_weights_.get(); }
  // Zero 3: this rank's slices of the weights; else empty.
  std::vector<Tensor> weight_slices() const;
  // Zero 3: every tensor whole, fp32 (the master's values with bf16 weights), gathered from
  // every rank's slices into a staging copy outside the step's ledger (a collective: every
  // rank calls it), for writing a checkpoint; release_staging() frees it.
  const ParameterSet& gather_values();
  void release_staging();

  // Whole gradient views for forward_backward (with zero 2 bound only inside a backward).
  const ParameterSet& grads() const { return grads_; }
  bool distributed() const { return comm_.size() > 1; }
  int zero() const { return zero_; }  // 0 with one rank, whatever was asked
  // offload: optimizer: the gradients between backwards, and norm_parts(), are in host memory.
  bool grads_on_host() const { return offload_; }

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
  // The sum of the squares of norm_parts(), in order, where they are (one device wait, or the
  // host's sums): norm_of(local_sum_squares()) == grad_norm().
  double local_sum_squares();
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
  // Where the trained values are loaded and saved when not in the weights themselves: the fp32
  // master weights of an optimizer that keeps them (zero 0), or with offload: optimizer the
  // host's copy of the weights; else null. After writing them, weights_loaded(weights).
  // Zero 3: a whole fp32 staging copy (outside the step's ledger) that weights_loaded() slices
  // and frees.
  ParameterSet* master();
  // Makes the device weights (and with offload the host's copy) follow master() after a load:
  // rounds the master into them, or copies the host's copy to the device.
  void weights_loaded(const ParameterSet& weights);
  // The other way: the device weights were written directly (bench draws them on the device),
  // and the optimizer's copies of them (master weights, the host's copy) follow.
  void weights_set(const ParameterSet& weights);
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
  // The whole gradient sums between backwards: the device's, or with offload the host's.
  const ParameterSet& held() const { return offload_ ? host_grads_ : grads_; }
  void gather_updated(const ParameterSet& w);  // zero 1/2: every rank's slices into w

  // ---- offload: optimizer (data_parallel_offload.cpp) ----
  // A group's device buffers under a copy to the host, released once it is waited for.
  struct Offloaded {
    std::vector<size_t> tensors;  // detached from grads_ at release
    std::vector<Buffer> temps;    // zero 2: the device copies of host shards being added to
    Backend::CopyTicket ticket = 0;
  };
  void bind_from_host(GradGroup group, int64_t layer);
  void offload_group(GradGroup group, int64_t layer);  // a slot that does not reduce
  void offload_reduced(size_t i, Offloaded& out);      // tensor i's reduced part
  void release_offloads(size_t keep);                   // all but the newest `keep`
  void host_ready();  // the device finished every copy: the host may read its buffers
  void upload_image(const ParameterSet& weights);
  void upload_image_slices();  // zero 3: the host's copy of the slices to the device's
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
  int64_t slot_ = 0;  // the slot being run (offload: its first one binds zeros)
  bool offload_ = false;
  std::unique_ptr<HostMath> host_;
  ParameterSet host_grads_;  // offload, zero 0/1: the whole sums, in host memory
  ParameterSet image_;       // offload: the weights in their dtype, in host memory
  // ---- zero 3 ----
  std::unique_ptr<ShardedWeights> sharded_weights_;
  std::vector<Buffer> image_slices_;  // offload: the host's copy of the slices, weights' dtype
  const ModelConfig* cfg_ = nullptr;
  ModelHead head_ = ModelHead::lm;
  // The whole-model staging copy of loads and saves, in its own ledger (not the step's).
  std::unique_ptr<Ledger> staging_ledger_;
  std::unique_ptr<Pool> staging_pool_;
  ParameterSet staging_;
  std::vector<Offloaded> offloads_;  // oldest first
  Counters counters_;
};

}  // namespace sbp
