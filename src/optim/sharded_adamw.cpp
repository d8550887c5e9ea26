#include "optim/sharded_adamw.h"

namespace sbp {

Tensor flat_slice(const Tensor& t, const ShardRange& r) {
  return t.reshaped({t.numel()}).slice_rows(r.offset, r.end());
}

ShardedAdamW::ShardedAdamW(const ModelConfig& cfg, ModelHead head, int ranks, int rank, Pool& pool,
                           AdamWConfig c, bool master)
    : cfg_(c), ranks_(ranks), rank_(rank), specs_(parameter_specs(cfg, head)) {
  for (const ParamSpec& s : specs_) {
    const ShardRange r = shard_range(s.shape.numel(), ranks, rank);
    ranges_.push_back(r);
    m_.push_back(pool.zeros(Category::optimizer, DType::F32, {r.count}));
    v_.push_back(pool.zeros(Category::optimizer, DType::F32, {r.count}));
  }
  if (master)
    for (const ShardRange& r : ranges_) master_.push_back(pool.allocate(Category::optimizer, DType::F32, {r.count}));
}

void ShardedAdamW::step(const ParameterSet& params, const std::vector<Tensor>& grad_slices,
                        Backend& be, float lr) {
  SBP_CHECK(grad_slices.size() == specs_.size(),
            "ShardedAdamW::step: one gradient slice per tensor");
  ++steps_;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (ranges_[i].count == 0) continue;
    AdamWStep s;
    s.lr = lr;
    s.beta1 = cfg_.beta1;
    s.beta2 = cfg_.beta2;
    s.eps = cfg_.eps;
    s.weight_decay =
        specs_[i].shape.ndim >= 2 ? cfg_.weight_decay : 0.0f;  // as AdamW: matrices only
    s.step = steps_;
    const Tensor w = flat_slice(params.tensor(i), ranges_[i]);
    if (master_.empty()) {
      be.adamw_step(w, grad_slices[i], m_[i].view(), v_[i].view(), s);
    } else {
      be.adamw_step(master_[i].view(), grad_slices[i], m_[i].view(), v_[i].view(), s);
      be.copy(w, master_[i].view());
    }
  }
}

}  // namespace sbp
