#pragma once
// A step's objectives kept to its end (StepRunner::at_finish): their losses and statistics add
// values that the engine reads there, with the step's one wait (objective.h grads_without_logp,
// policy_terms, sequence_terms), so they must live until then. The step's loss is the sum of
// theirs over every rank; its statistics are the means of theirs, weighted by each micro-batch's
// pairs, sequences or tokens (weighted_means.h).
#include <memory>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "objective/objective.h"
#include "step/step_runner.h"

namespace sbp {

class KeptObjectives {
 public:
  // Keeps `objective`, whose statistics weigh `weight`; returns it for the micro-batch's pass.
  template <class O>
  O& keep(std::unique_ptr<O> objective, double weight) {
    O& o = *objective;
    kept_.push_back({std::move(objective), weight});
    return o;
  }
  // r.loss += their losses, summed over ranks; r.metrics = their statistics' weighted means.
  void complete(StepResult& r, Communicator& comm) const;

 private:
  struct Kept {
    std::unique_ptr<Objective> objective;
    double weight = 0.0;
  };
  std::vector<Kept> kept_;
};

}  // namespace sbp
