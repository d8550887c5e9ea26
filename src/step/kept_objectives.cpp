#include "step/kept_objectives.h"

#include "step/weighted_means.h"

namespace sbp {

void KeptObjectives::complete(StepResult& r, Communicator& comm) const {
  WeightedMeans stats;
  for (const Kept& k : kept_) {
    r.loss += k.objective->loss();
    stats.add(k.objective->metrics(), k.weight);
  }
  r.loss = comm.sum(r.loss);
  stats.merge_ranks(comm);
  r.metrics = stats.means();
}

}  // namespace sbp
