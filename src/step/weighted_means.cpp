#include "step/weighted_means.h"

#include <nlohmann/json.hpp>

namespace sbp {

void WeightedMeans::add(const std::map<std::string, double>& m, double w) {
  for (const auto& [k, v] : m)
    if (k != "loss") sum_[k] += v * w;
  weight_ += w;
}

void WeightedMeans::merge_ranks(Communicator& comm) {
  if (comm.size() == 1) return;
  const std::string mine = nlohmann::json{{"sum", sum_}, {"weight", weight_}}.dump();
  sum_.clear();
  weight_ = 0.0;
  for (const std::string& text : comm.allgather(mine)) {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& [k, v] : j["sum"].items()) sum_[k] += v.get<double>();
    weight_ += j["weight"].get<double>();
  }
}

std::map<std::string, double> WeightedMeans::means() const {
  std::map<std::string, double> out;
  for (const auto& [k, v] : sum_) out[k] = weight_ > 0.0 ? v / weight_ : 0.0;
  return out;
}

}  // namespace sbp
