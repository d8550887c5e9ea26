#pragma once
// The scalar formulas the preference and value objectives are built from, each with its
// derivative, in double precision; the policy-gradient terms (clipped surrogate, k3 KL, clipped
// value loss) are in objective/policy_terms.h and the preference objectives' (DPO pair losses,
// ORPO's log odds, log sigmoid) in objective/sequence_terms.h, shared with the device. They are
// pure functions so that finite-difference tests can check them one by one
// (tests/objective/token_terms_test.cpp).
//
// Derivatives at kinks follow PyTorch's autograd, as objective/policy_terms.h says; relu has
// derivative 0 at 0.
#include "objective/policy_terms.h"
#include "objective/sequence_terms.h"

namespace sbp {

// k1 estimator: value = logp - ref, d = 1.
Term kl_k1(double logp, double ref_logp);

}  // namespace sbp
