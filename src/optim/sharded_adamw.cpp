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

template <class Ops>
void ShardedAdamW::step(const ParameterSet& params, const std::vector<Tensor>& grad_slices,
                        Ops& ops, float lr) {
  std::vector<Tensor> w;
  for (size_t i = 0; i < specs_.size(); ++i) w.push_back(flat_slice(params.tensor(i), ranges_[i]));
  step_slices(w, grad_slices, ops, lr);
}

template <class Ops>
void ShardedAdamW::step_slices(const std::vector<Tensor>& weight_slices,
                               const std::vector<Tensor>& grad_slices, Ops& ops, float lr) {
  SBP_CHECK(grad_slices.size() == specs_.size() && weight_slices.size() == specs_.size(),
            "ShardedAdamW::step: one weight and one gradient slice per tensor");
  ++steps_;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (ranges_[i].count == 0) continue;
    const AdamWStep s = adamw_step_of(cfg_, lr, steps_, specs_[i].shape.ndim);  // as AdamW
    const Tensor& w = weight_slices[i];
    if (master_.empty()) {
      ops.adamw_step(w, grad_slices[i], m_[i].view(), v_[i].view(), s);
    } else {
      ops.adamw_step(master_[i].view(), grad_slices[i], m_[i].view(), v_[i].view(), s);
      ops.copy(w, master_[i].view());
    }
  }
}
template void ShardedAdamW::step(const ParameterSet&, const std::vector<Tensor>&, Backend&, float);
template void ShardedAdamW::step(const ParameterSet&, const std::vector<Tensor>&, HostMath&,
                                 float);
template void ShardedAdamW::step_slices(const std::vector<Tensor>&, const std::vector<Tensor>&,
                                        Backend&, float);
template void ShardedAdamW::step_slices(const std::vector<Tensor>&, const std::vector<Tensor>&,
                                        HostMath&, float);

}  // namespace sbp
