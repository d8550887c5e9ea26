#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace sbp {

void SamplingParams::validate(const std::string& where) const {
  if (!(temperature > 0.0 && std::isfinite(temperature)))
    throw InputError(where + ": temperature must be a finite number > 0");
  if (top_k < 0) throw InputError(where + ": top_k must be >= 0 (0 = no limit)");
  if (!(top_p > 0.0 && top_p <= 1.0)) throw InputError(where + ": top_p must be in (0, 1]");
  if (!(min_p >= 0.0 && min_p < 1.0)) throw InputError(where + ": min_p must be in [0, 1)");
}

int32_t choose_token(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
  const size_t V = logits.size();
  SBP_CHECK(V > 0, "choose_token: empty logits");
  if (p.greedy) {
    size_t best = 0;
    for (size_t j = 1; j < V; ++j)
      if (logits[j] > logits[best]) best = j;
    return static_cast<int32_t>(best);
  }
  // Probabilities of logits / temperature, in fp64 (the max subtracted first).
  double top = -INFINITY;
  for (float l : logits) top = std::max(top, static_cast<double>(l));
  std::vector<double> prob(V);
  for (size_t j = 0; j < V; ++j) prob[j] = std::exp((logits[j] - top) / p.temperature);
  const double total = std::accumulate(prob.begin(), prob.end(), 0.0);
  for (double& q : prob) q /= total;

  // Most likely first; equal probabilities by id.
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  size_t keep = V;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < V) keep = static_cast<size_t>(p.top_k);
  const auto more_likely = [&](int32_t a, int32_t b) {
    return prob[a] > prob[b] || (prob[a] == prob[b] && a < b);
  };
  // Only the kept head needs ordering: a partial sort when top_k cuts the vocabulary.
  if (keep < V) {
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      more_likely);
  } else {
    std::sort(order.begin(), order.end(), more_likely);
  }
  if (p.top_p < 1.0) {
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += prob[order[n++]];
      if (mass >= p.top_p) break;
    }
    keep = std::max<size_t>(n, 1);
  }
  if (p.min_p > 0.0) {
    const double floor = p.min_p * prob[order[0]];
    size_t n = 1;
    while (n < keep && prob[order[n]] >= floor) ++n;
    keep = n;
  }
  double kept_mass = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_mass += prob[order[i]];
  const double u = rng.uniform() * kept_mass;
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[order[i]];
    if (u < cum) return order[i];
  }
  return order[keep - 1];  // u within rounding of kept_mass
}

double token_logprob(std::span<const float> logits, int32_t id) {
  SBP_CHECK(id >= 0 && static_cast<size_t>(id) < logits.size(), "token_logprob: id out of range");
  double top = -INFINITY;
  for (float l : logits) top = std::max(top, static_cast<double>(l));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - top);
  return static_cast<double>(logits[static_cast<size_t>(id)]) - top - std::log(sum);
}

}  // namespace sbp
