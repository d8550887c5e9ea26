#pragma once
// AdamW over one rank's shard of the parameters (ZeRO stages 1 and 2, docs/DISTRIBUTED.md): the
// fp32 moments exist only for this rank's slice of every tensor (shard_range.h), so each rank's
// `optimizer` category holds 1/R of what AdamW holds. The update is AdamW's own kernel applied
// to the slices; it is element-wise, so a slice's result is bit for bit that of the full
// update. The caller all-gathers the updated slices into every rank's full weights.
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/shard_range.h"

namespace sbp {

class ShardedAdamW {
 public:
  // Zeroed moments for rank `rank` of `ranks`, in the layout of parameter_specs(cfg, head).
  // With `master`: fp32 master slices of the weights too (AdamW's master, sliced).
  ShardedAdamW(const ModelConfig& cfg, ModelHead head, int ranks, int rank, Pool& pool,
               AdamWConfig c, bool master = false);

  // Updates this rank's slice of every tensor of `params` with grad_slices[i] (the slice's
  // reduced gradient, range(i).count elements); increments the step count. The rest of
  // `params` is not touched.
  // `ops`: Backend or HostMath, as AdamW::step.
  template <class Ops>
  void step(const ParameterSet& params, const std::vector<Tensor>& grad_slices, Ops& ops,
            float lr);

  // The same update on weights that are slices themselves (ZeRO-3, dist/sharded_weights.h):
  // weight_slices[i] holds range(i).count elements.
  template <class Ops>
  void step_slices(const std::vector<Tensor>& weight_slices,
                   const std::vector<Tensor>& grad_slices, Ops& ops, float lr);

  // The fp32 master slice of tensor i (with `master`; else undefined): whoever loads the
  // weights writes it.
  Tensor master_slice(size_t i) const { return master_.empty() ? Tensor() : master_[i].view(); }
  bool has_master() const { return !master_.empty(); }

  size_t size() const { return specs_.size(); }
  const ParamSpec& spec(size_t i) const { return specs_[i]; }
  const ShardRange& range(size_t i) const { return ranges_[i]; }
  const Tensor& m(size_t i) const { return m_[i].view(); }  // (range(i).count) F32
  const Tensor& v(size_t i) const { return v_[i].view(); }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  int ranks_, rank_;
  std::vector<ParamSpec> specs_;
  std::vector<ShardRange> ranges_;
  std::vector<Buffer> m_, v_, master_;
  int64_t steps_ = 0;
};

// Elements [r.offset, r.end()) of a tensor's flattened data, as a 1-D view of r.count elements.
Tensor flat_slice(const Tensor& t, const ShardRange& r);

}  // namespace sbp
