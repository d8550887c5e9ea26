#include "objective/token_terms.h"

#include <algorithm>
#include <cmath>

namespace sbp {

Term kl_k1(double logp, double ref_logp) { return Term{logp - ref_logp, 1.0}; }

}  // namespace sbp
