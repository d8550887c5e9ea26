#pragma once
// The scalar formulas the preference and value objectives are built from, each with its
// derivative, in double precision; the policy-gradient terms (clipped surrogate, k3 KL, clipped
// value loss) are in core/policy_terms.h, shared with the device. They are pure functions so that
// finite-difference tests can check them one by one (tests/objective/token_terms_test.cpp).
//
// Derivatives at kinks follow PyTorch's autograd, as core/policy_terms.h says; relu has
// derivative 0 at 0.
#include "core/policy_terms.h"

namespace sbp {

// k1 estimator: value = logp - ref, d = 1.
Term kl_k1(double logp, double ref_logp);

// DPO pair losses of z = (logpi_c - logpi_r) - (logref_c - logref_r) (TRL's `logits`);
// d = dloss/dz.
//   sigmoid: -(1 - ls) log sigmoid(beta z) - ls log sigmoid(-beta z)
//   hinge:   relu(1 - beta z)
//   ipo:     (z - 1 / (2 beta))^2       (z built from length-averaged log-probs, see dpo.h)
enum class DpoLoss { sigmoid, hinge, ipo };
Term dpo_pair_loss(double z, DpoLoss type, double beta, double label_smoothing);

// log(sigmoid(x)) without overflow for large |x|.
double log_sigmoid(double x);

}  // namespace sbp
