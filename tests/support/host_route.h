#pragma once
// An objective on its route's host version (objective/head_route.h host_chunks): everything of
// `inner` but where its formula runs, so a test can run the engine's device route and the host's
// on the same objective and require the same bits.
#include <map>
#include <span>
#include <string>
#include <vector>

#include "objective/objective.h"

namespace sbp::test {

class OnTheHost final : public Objective {
 public:
  explicit OnTheHost(Objective& inner) : inner_(inner) {}
  HeadKind head() const override { return inner_.head(); }
  HeadRoute route() override { return host_chunks(inner_.route()); }
  std::vector<std::span<double>> prepass_sums(int p) override { return inner_.prepass_sums(p); }
  std::vector<std::span<double>> pass_sums() override { return inner_.pass_sums(); }
  double loss() const override { return inner_.loss(); }
  std::map<std::string, double> metrics() const override { return inner_.metrics(); }

 private:
  Objective& inner_;
};

}  // namespace sbp::test
