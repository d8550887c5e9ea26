#pragma once
// Which tensors of a parameter set belong to each gradient group of engine/grad_hook.h, by
// their identity's group (model/parameter_id.h): a layer's tensors to that layer, the embedding
// to the embedding, the final norm, the LM head and the value head to the head.
#include <cstdint>
#include <vector>

#include "engine/grad_hook.h"
#include "engine/weight_hook.h"
#include "model/parameters.h"

namespace sbp {

class GradGroups {
 public:
  explicit GradGroups(const ParameterSet& params);
  // Indices into the parameter set, in set order.
  const std::vector<size_t>& of(GradGroup group, int64_t layer) const;
  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }

 private:
  std::vector<size_t> head_, embedding_;
  std::vector<std::vector<size_t>> layers_;
};

// The events Engine::forward_backward sends a hook, in its order, with no backward: what a rank
// replays for a micro-batch slot it has no data for, so that every rank issues the same
// collectives in the same order. `tied_lm_head`: the head writes the embedding (grad_hook.h).
void replay_grad_events(GradHook& hook, int64_t layers, bool tied_lm_head);
// The same with ZeRO-3's weight events (engine/weight_hook.h) interleaved as the engine sends
// them, forward included: a rank's empty slot gathers every group as the others' steps do.
void replay_step_events(GradHook& grads, WeightHook& weights, int64_t layers, bool tied_lm_head);

}  // namespace sbp
