#include "objective/token_terms.h"

#include <algorithm>
#include <cmath>

namespace sbp {

Term kl_k1(double logp, double ref_logp) { return Term{logp - ref_logp, 1.0}; }

double log_sigmoid(double x) {
  // log(1 / (1 + e^-x)) = -log1p(e^-x) for x >= 0, x - log1p(e^x) otherwise.
  return x >= 0.0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
}

namespace {
double sigmoid(double x) {
  return x >= 0.0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}
}  // namespace

Term dpo_pair_loss(double z, DpoLoss type, double beta, double ls) {
  Term t;
  switch (type) {
    case DpoLoss::sigmoid: {
      const double x = beta * z;
      t.value = -(1.0 - ls) * log_sigmoid(x) - ls * log_sigmoid(-x);
      // d/dx -log sigmoid(x) = -sigmoid(-x);  d/dx -log sigmoid(-x) = sigmoid(x)
      t.d = beta * (-(1.0 - ls) * sigmoid(-x) + ls * sigmoid(x));
      break;
    }
    case DpoLoss::hinge: {
      const double m = 1.0 - beta * z;
      t.value = std::max(m, 0.0);
      t.d = m > 0.0 ? -beta : 0.0;  // relu'(0) = 0, as in PyTorch
      break;
    }
    case DpoLoss::ipo: {
      const double u = z - 1.0 / (2.0 * beta);
      t.value = u * u;
      t.d = 2.0 * u;
      break;
    }
  }
  return t;
}

}  // namespace sbp
