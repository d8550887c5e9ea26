#pragma once
// The interface the streamed head drives (DESIGN §2 "Objectives"). The engine computes the
// head one block of rows at a time and never shows an objective more than that block:
//
//   per-token target log-probs (LM head) or values (value head)  in
//   dL/dlogp (or dL/dvalue), optionally dL/dentropy               out
//
// An objective whose per-token gradient needs a statistic of the whole batch of the CURRENT
// pass (DPO: per-sequence sums of the policy's log-probs) asks for no-grad pre-passes: the
// engine runs the head over every block once per pre-pass (from the kept final hidden state,
// not a second forward of the layers) before the gradient pass. Everything else an objective
// needs (advantages, reference log-probs, masks, normalisers) must be constants computed
// before the step, so that dL/dlogp_t depends only on logp_t and constants: that is what lets
// every objective stream.
//
// Row convention: row t of the packed batch predicts token t+1 of its segment
// (Batch::targets); rows without a target carry logp 0 and must get dlogp 0.
//
// The ways the head can run (host blocks, constant gradients, a per-token or per-sequence
// formula on the device) are head_route.h's routes: an objective names its one route.
#include <map>
#include <span>
#include <string>
#include <vector>

#include "objective/head_route.h"

namespace sbp {

// Which head the objective trains: the LM head (logits over the vocabulary) or a value head
// (a d -> 1 projection, "score.weight", of value models; see model/parameters.h).
enum class HeadKind { lm, value };

class Objective {
 public:
  virtual ~Objective() = default;

  virtual HeadKind head() const { return HeadKind::lm; }
  // How the engine runs the head for this objective, with the route's inputs and completion
  // (head_route.h). Called once per pass over the head; the route's callbacks hold the
  // objective, which must outlive them (and, given DeferredReads, the step's end).
  virtual HeadRoute route() = 0;

  // Context parallelism (engine/context_slice.h): each rank of a context group is shown only
  // its own rows' blocks, so what an objective sums over rows is partial on each rank, and the
  // engine sums it over the group: prepass_sums(p) once every rank has seen its blocks of
  // pre-pass p, before finish_prepass(p); pass_sums() after the gradient pass. Each lists the
  // objective's row-additive accumulators (per-sequence sums, loss and metric sums); whatever
  // is computed from them must be computed after the sum. An accumulator left out shows as a
  // loss or metric that differs from one process's (tests/dist/context_parallel_test.cpp).
  virtual std::vector<std::span<double>> prepass_sums(int pass) { return {}; }
  virtual std::vector<std::span<double>> pass_sums() { return {}; }

  // This micro-batch's contribution to the step loss (complete after the gradient pass; for
  // objectives with pre-passes, after the last pre-pass).
  virtual double loss() const { return 0.0; }
  // Named statistics as TRL logs them ("loss", "rewards/chosen", "kl", ...).
  virtual std::map<std::string, double> metrics() const { return {{"loss", loss()}}; }
};

}  // namespace sbp
