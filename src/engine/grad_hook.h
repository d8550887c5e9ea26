#pragma once
// Where a backward pass stands with each group of parameter gradients, for whoever needs to act
// on a gradient as soon as it is complete: data parallelism (src/dist/) reduces a layer's
// gradients across ranks right after that layer's chunk loop, while the next layer's backward
// runs, and with ZeRO-2 binds a group's gradient buffers only while the group is being written.
// The engine knows nothing of what the hook does.
//
// The groups, in the order Engine::forward_backward reaches them:
//   head        the final norm and the head's matrix: lm_head (untied) or score (value models)
//   layer l     every tensor of decoder layer l, for l = L-1 down to 0
//   embedding   the embedding; with a tied LM head the head pass writes it too, so it is opened
//               before the head and final only after the embedding backward
//
// A group's gradient is complete only after every chunk of it has been processed, so each event
// fires once per forward_backward call, never once per chunk.
#include <cstdint>

namespace sbp {

enum class GradGroup { head, layer, embedding };

class GradHook {
 public:
  virtual ~GradHook() = default;
  // Before the backward first writes the group's gradients. The hook may (re)bind the group's
  // tensors in the gradient ParameterSet here; the engine reads them after this call.
  virtual void grads_begin(GradGroup group, int64_t layer) = 0;
  // After the backward has written the group's gradients for the last time in this call.
  virtual void grads_final(GradGroup group, int64_t layer) = 0;
};

}  // namespace sbp
