#include "objective/token_terms.h"

#include <algorithm>
#include <cmath>

namespace sbp {

Term clipped_surrogate(double logp, double old_logp, double adv, double eps_low, double eps_high) {
  const double r = std::exp(logp - old_logp);
  const double lo = 1.0 - eps_low, hi = 1.0 + eps_high;
  const double c = std::clamp(r, lo, hi);
  const double unclipped = r * adv, clipped = c * adv;
  Term t;
  t.value = -std::min(unclipped, clipped);
  // Inside [lo, hi] both branches are the same function of r (ties split the gradient
  // half/half, and clamp passes it): the full -adv r. Outside, only a strictly smaller
  // unclipped branch carries a gradient; the clamped branch is constant there.
  const bool inside = r >= lo && r <= hi;
  t.d = (inside || unclipped < clipped) ? -adv * r : 0.0;
  return t;
}

bool clipped_low(double logp, double old_logp, double adv, double eps_low) {
  return std::exp(logp - old_logp) < 1.0 - eps_low && adv < 0.0;
}

bool clipped_high(double logp, double old_logp, double adv, double eps_high) {
  return std::exp(logp - old_logp) > 1.0 + eps_high && adv > 0.0;
}

Term kl_k3(double logp, double ref_logp) {
  const double delta = ref_logp - logp;
  const double e = std::exp(delta);
  return Term{e - delta - 1.0, 1.0 - e};
}

Term kl_k1(double logp, double ref_logp) { return Term{logp - ref_logp, 1.0}; }

Term clipped_value_loss(double v, double v_old, double ret, double eps) {
  const double lo = v_old - eps, hi = v_old + eps;
  const double vc = std::clamp(v, lo, hi);
  const double a = (v - ret) * (v - ret), b = (vc - ret) * (vc - ret);
  Term t;
  t.value = std::max(a, b);
  const double da = 2.0 * (v - ret);
  const double db = (v >= lo && v <= hi) ? 2.0 * (vc - ret) : 0.0;
  t.d = a > b ? da : (b > a ? db : 0.5 * (da + db));  // torch.maximum splits ties
  return t;
}

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
