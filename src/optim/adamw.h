#pragma once
// AdamW (decoupled weight decay, bias correction, fp32 moments) over a ParameterSet, and
// global-norm gradient clipping.
#include <cstdint>

#include "backend/backend.h"
#include "backend/host_math.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/parameters.h"

namespace sbp {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // applied to matrices only (not to norms and biases), as the
                              // Hugging Face Trainer does
};

class AdamW {
 public:
  // Moments are allocated zeroed in the ledger's `optimizer` category, in the layout of the
  // parameters they update (`head`: ModelHead::value for a PPO value model). With `master`, an
  // fp32 master copy of the weights too (same category), for weights stored in bf16: the update
  // is applied to the master and rounded into the weights, since an update smaller than 2^-8 of
  // a bf16 weight would be lost applied to the weight itself.
  AdamW(const ModelConfig& cfg, Pool& pool, AdamWConfig c, ModelHead head = ModelHead::lm,
        bool master = false);

  // One update of `params` with `grads` at learning rate lr; increments the step count.
  // `ops`: the Backend the tensors live on, or HostMath (backend/host_math.h) when they live in
  // host memory (`offload: optimizer`): the same kernel and bits either way.
  template <class Ops>
  void step(const ParameterSet& params, const ParameterSet& grads, Ops& ops, float lr);

  // The fp32 master weights (null without); set from the weights at the start of a fresh run.
  const ParameterSet* master() const { return master_.size() ? &master_ : nullptr; }
  ParameterSet* master() { return master_.size() ? &master_ : nullptr; }

  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }
  const ParameterSet& m() const { return m_; }
  const ParameterSet& v() const { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  ParameterSet m_;
  ParameterSet v_;
  ParameterSet master_;  // fp32 master weights, or empty
  int64_t steps_ = 0;
};

// sqrt(sum of squares of every gradient), accumulated in fp64 in a fixed order.
double global_grad_norm(const ParameterSet& grads, Backend& be);
// The AdamWStep of step `step` for a tensor of ndim dimensions: weight decay for matrices only.
AdamWStep adamw_step_of(const AdamWConfig& c, float lr, int64_t step, int ndim);
// Gradient clipping as torch.nn.utils.clip_grad_norm_: the factor max_norm / (norm + 1e-6)
// when norm > max_norm > 0, else 1 (max_norm <= 0 only measures). Every clip below uses it.
float clip_factor(double max_norm, double norm);
// Scales the gradients by clip_factor(max_norm, norm), given their norm (global_grad_norm).
// Queues work, reads nothing.
void scale_to_max_norm(const ParameterSet& grads, Backend& be, double max_norm, double norm);

}  // namespace sbp
