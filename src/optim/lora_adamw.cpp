#include "optim/lora_adamw.h"

#include <cmath>
#include <vector>

namespace sbp {

LoraAdamW::LoraAdamW(const ModelConfig& cfg, const LoraConfig& lc, Pool& pool, AdamWConfig c)
    : cfg_(c),
      m_(cfg, lc, pool, Category::optimizer, DType::F32, true),
      v_(cfg, lc, pool, Category::optimizer, DType::F32, true) {}

void LoraAdamW::step(const LoraSet& params, const LoraSet& grads, Backend& be, float lr) {
  ++steps_;
  // Every adapter tensor is a matrix: all of them decay.
  const AdamWStep s = adamw_step_of(cfg_, lr, steps_, 2);
  for (size_t i = 0; i < params.size(); ++i)
    be.adamw_step(params.tensor(i), grads.tensor(i), m_.tensor(i), v_.tensor(i), s);
}

std::vector<MomentSlice> LoraAdamW::slices() const {
  std::vector<MomentSlice> out;
  for (size_t i = 0; i < m_.size(); ++i) {
    const int64_t n = m_.tensor(i).numel();
    out.push_back({m_.name(i), n, ShardRange{0, n}, m_.tensor(i), v_.tensor(i)});
  }
  return out;
}

void LoraAdamW::save(const std::string& dir) const { write_optimizer_file(dir, slices(), steps_); }

void LoraAdamW::load(const std::string& dir) { steps_ = read_optimizer_state(dir, slices()); }

double lora_grad_norm(const LoraSet& grads, Backend& be) {
  std::vector<Tensor> g;
  g.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) g.push_back(grads.tensor(i));
  return std::sqrt(be.sum_squares(g));  // one device wait for all of them
}

void scale_lora_grads(const LoraSet& grads, Backend& be, double max_norm, double norm) {
  const float scale = clip_factor(max_norm, norm);
  if (scale == 1.0f) return;
  for (size_t i = 0; i < grads.size(); ++i) be.scale_inplace(grads.tensor(i), scale);
}

}  // namespace sbp
