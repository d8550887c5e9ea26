#pragma once
// Where the engine stands with each group of weights, for whoever keeps them somewhere else
// between uses: ZeRO-3 (src/dist/sharded_weights.h) keeps 1/N of every tensor per rank and
// all-gathers a group into the engine's ParameterSet just before the engine reads it, and
// frees it after. The groups are those of grad_hook.h (head, layer l, embedding); with a tied
// LM head the head's matrix is the embedding, so acquiring the head acquires the embedding too.
//
// Order of one forward_backward: prefetch(layer 0); acquire/release(embedding); for each layer
// acquire(l), prefetch(l + 1, or the head after the last), compute, release(l); acquire(head),
// prefetch(layer L-1), head pass, release(head); for l = L-1 .. 0: acquire(l), prefetch(l - 1),
// backward (recompute included), release(l). The embedding backward reads no weight. Forward-
// only passes (score, values, logits_at) run the first half and the head.
#include <cstdint>

#include "engine/grad_hook.h"

namespace sbp {

class WeightHook {
 public:
  virtual ~WeightHook() = default;
  // On return the group's tensors are bound in the weights the engine reads (gathered now, or
  // waited for when a prefetch issued their gather). Calls nest: a tensor stays bound until its
  // last acquire is released.
  virtual void weights_acquire(GradGroup group, int64_t layer) = 0;
  // Starts the group's gather so that it travels while the current group computes; the next
  // acquire of the group waits for it. A hint: a hook may do nothing.
  virtual void weights_prefetch(GradGroup group, int64_t layer) = 0;
  // The engine reads none of the group's tensors until it acquires them again.
  virtual void weights_release(GradGroup group, int64_t layer) = 0;
};

}  // namespace sbp
