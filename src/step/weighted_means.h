#pragma once
// Step statistics as TRL logs them: each micro-batch's objective reports means over its own
// rows or pairs; the step's value is their mean weighted by those counts, over every rank.
#include <map>
#include <string>

#include "dist/communicator.h"

namespace sbp {

class WeightedMeans {
 public:
  // Adds a micro-batch's statistics with weight `w` (its pairs, sequences or tokens). "loss" is
  // left out: losses are sums, not means.
  void add(const std::map<std::string, double>& m, double w);
  // The sums of every rank (a rank with no micro-batch has no keys: so gathered, not reduced).
  void merge_ranks(Communicator& comm);
  std::map<std::string, double> means() const;

 private:
  std::map<std::string, double> sum_;
  double weight_ = 0.0;
};

}  // namespace sbp
