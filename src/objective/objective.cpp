#include "objective/objective.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace sbp {

void Objective::chunk_grads(const TokenChunk& in, const TokenChunkGrads& out) {
  if (const ValueTerms* terms = value_terms()) {  // what the backend computes, on the host
    const size_t n = in.value.size();
    std::vector<float> rows(n * kValueRowWidth);  // (n, 3)
    value_rows(in.row_begin, rows);
    for (size_t i = 0; i < n; ++i)
      out.dvalue[i] = value_token_grad(in.value[i], &rows[i * kValueRowWidth], *terms);
    add_values(in);
    return;
  }
  SBP_CHECK(head() == HeadKind::lm, "objective: a value-head objective must override chunk_grads");
  if (const PolicyTerms* terms = policy_terms()) {  // what the backend computes, on the host
    const size_t n = in.logp.size();
    std::vector<float> rows(n * kPolicyRowWidth);  // (n, 4)
    policy_rows(in.row_begin, rows);
    for (size_t i = 0; i < n; ++i) {
      const PolicyGrad g = policy_token_grad(in.logp[i], &rows[i * kPolicyRowWidth], *terms);
      out.dlogp[i] = g.dlogp;
      if (!out.dentropy.empty()) out.dentropy[i] = g.dentropy;
    }
    add_values(in);
    return;
  }
  if (grads_without_logp()) {  // the same numbers as the engine's path without the values
    constant_grads(in.row_begin, out.dlogp);
    if (prepasses() == 0) add_logp(in.row_begin, in.logp);
  } else {
    token_grads(in.row_begin, in.logp, out.dlogp);
  }
  std::fill(out.dentropy.begin(), out.dentropy.end(), 0.0f);
}

void Objective::token_grads(int64_t, std::span<const float>, std::span<float>) {
  throw Error("objective: neither chunk_grads nor token_grads is implemented");
}

void Objective::constant_grads(int64_t, std::span<float>) {
  throw Error("objective: grads_without_logp() without constant_grads()");
}

void Objective::policy_rows(int64_t, std::span<float>) const {
  throw Error("objective: policy_terms() without policy_rows()");
}

void Objective::value_rows(int64_t, std::span<float>) const {
  throw Error("objective: value_terms() without value_rows()");
}

void Objective::add_values(const TokenChunk&) {
  throw Error("objective: policy_terms() or value_terms() without add_values()");
}

void Objective::add_logp(int64_t, std::span<const float>) {
  throw Error("objective: grads_without_logp() without add_logp()");
}

}  // namespace sbp
