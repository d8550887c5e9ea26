#include "dist/grad_groups.h"

#include <string>

#include "core/error.h"

namespace sbp {

GradGroups::GradGroups(const ParameterSet& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamId& id = params.id(i);
    switch (id.group()) {
      case ParamGroup::layer: {
        const size_t l = static_cast<size_t>(id.layer);
        if (layers_.size() <= l) layers_.resize(l + 1);
        layers_[l].push_back(i);
        break;
      }
      case ParamGroup::embedding: embedding_.push_back(i); break;
      case ParamGroup::head: head_.push_back(i); break;
    }
  }
}

const std::vector<size_t>& GradGroups::of(GradGroup group, int64_t layer) const {
  if (group == GradGroup::head) return head_;
  if (group == GradGroup::embedding) return embedding_;
  SBP_CHECK(layer >= 0 && layer < layers(), "GradGroups: no layer " + std::to_string(layer));
  return layers_[static_cast<size_t>(layer)];
}

void replay_grad_events(GradHook& hook, int64_t layers, bool tied_lm_head) {
  // The same sequence as Engine::forward_backward.
  if (tied_lm_head) hook.grads_begin(GradGroup::embedding, -1);
  hook.grads_begin(GradGroup::head, -1);
  hook.grads_final(GradGroup::head, -1);
  for (int64_t l = layers - 1; l >= 0; --l) {
    hook.grads_begin(GradGroup::layer, l);
    hook.grads_final(GradGroup::layer, l);
  }
  if (!tied_lm_head) hook.grads_begin(GradGroup::embedding, -1);
  hook.grads_final(GradGroup::embedding, -1);
}

void replay_step_events(GradHook& grads, WeightHook& weights, int64_t layers, bool tied_lm_head) {
  // Engine::forward_layers, then Engine::forward_backward and layers_backward, in their order.
  if (layers > 0) weights.weights_prefetch(GradGroup::layer, 0);
  weights.weights_acquire(GradGroup::embedding, -1);
  weights.weights_release(GradGroup::embedding, -1);
  for (int64_t l = 0; l < layers; ++l) {
    weights.weights_acquire(GradGroup::layer, l);
    if (l + 1 < layers)
      weights.weights_prefetch(GradGroup::layer, l + 1);
    else
      weights.weights_prefetch(GradGroup::head, -1);
    weights.weights_release(GradGroup::layer, l);
  }
  if (tied_lm_head) grads.grads_begin(GradGroup::embedding, -1);
  grads.grads_begin(GradGroup::head, -1);
  weights.weights_acquire(GradGroup::head, -1);
  weights.weights_prefetch(GradGroup::layer, layers - 1);
  weights.weights_release(GradGroup::head, -1);
  grads.grads_final(GradGroup::head, -1);
  for (int64_t l = layers - 1; l >= 0; --l) {
    grads.grads_begin(GradGroup::layer, l);
    weights.weights_acquire(GradGroup::layer, l);
    if (l > 0) weights.weights_prefetch(GradGroup::layer, l - 1);
    weights.weights_release(GradGroup::layer, l);
    grads.grads_final(GradGroup::layer, l);
  }
  if (!tied_lm_head) grads.grads_begin(GradGroup::embedding, -1);
  grads.grads_final(GradGroup::embedding, -1);
}

}  // namespace sbp
