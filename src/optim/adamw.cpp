#include "optim/adamw.h"

#include <cmath>
#include <vector>

namespace sbp {

AdamW::AdamW(const ModelConfig& cfg, Pool& pool, AdamWConfig c, ModelHead head, bool master)
    : cfg_(c),
      m_(cfg, pool, Category::optimizer, DType::F32, true, head),
      v_(cfg, pool, Category::optimizer, DType::F32, true, head) {
  if (master) master_ = ParameterSet(cfg, pool, Category::optimizer, DType::F32, false, head);
}

AdamWStep adamw_step_of(const AdamWConfig& c, float lr, int64_t step, int ndim) {
  AdamWStep s;
  s.lr = lr;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.eps = c.eps;
  s.weight_decay = ndim >= 2 ? c.weight_decay : 0.0f;
  s.step = step;
  return s;
}

template <class Ops>
void AdamW::step(const ParameterSet& params, const ParameterSet& grads, Ops& ops, float lr) {
  ++steps_;
  for (size_t i = 0; i < params.size(); ++i) {
    const AdamWStep s = adamw_step_of(cfg_, lr, steps_, params.tensor(i).shape.ndim);
    if (master_.size() == 0) {
      ops.adamw_step(params.tensor(i), grads.tensor(i), m_.tensor(i), v_.tensor(i), s);
    } else {
      ops.adamw_step(master_.tensor(i), grads.tensor(i), m_.tensor(i), v_.tensor(i), s);
      ops.copy(params.tensor(i), master_.tensor(i));  // rounded to the weights' dtype
    }
  }
}
template void AdamW::step(const ParameterSet&, const ParameterSet&, Backend&, float);
template void AdamW::step(const ParameterSet&, const ParameterSet&, HostMath&, float);

double global_grad_norm(const ParameterSet& grads, Backend& be) {
  std::vector<Tensor> g;
  g.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) g.push_back(grads.tensor(i));
  return std::sqrt(be.sum_squares(g));  // one device wait for all of them
}

float clip_factor(double max_norm, double norm) {
  return max_norm > 0.0 && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

void scale_to_max_norm(const ParameterSet& grads, Backend& be, double max_norm, double norm) {
  const float scale = clip_factor(max_norm, norm);
  if (scale == 1.0f) return;
  for (size_t i = 0; i < grads.size(); ++i) be.scale_inplace(grads.tensor(i), scale);
}

}  // namespace sbp
