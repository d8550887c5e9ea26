// The policy-gradient objectives' per-token gradients on the CPU backends (policy_token_grads
// and value_token_grads of objective_kernels.h): the objectives' own formulas
// (objective/policy_terms.h) over the rows of one head block, in host memory.
#include "objective_kernels/kernel_table.h"

namespace sbp {

void cpu_policy_token_grads(Backend&, const Tensor& dlogp, const Tensor& dentropy,
                            const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                            const Tensor& ref) {
  const int64_t n = logp.numel();
  const float* lp = logp.f32();                              // (n)
  const float* r = rows.f32();                               // (n, 4)
  float* d = dlogp.f32();                                    // (n)
  float* e = dentropy.defined() ? dentropy.f32() : nullptr;  // (n) or none
  const float* rf = ref.defined() ? ref.f32() : nullptr;     // (n) or none
  for (int64_t i = 0; i < n; ++i) {  // a head block's rows: a few hundred, not worth threads
    const PolicyGrad g =
        policy_token_grad(lp[i], r + i * kPolicyRowWidth, terms, rf ? rf + i : nullptr);
    d[i] = g.dlogp;
    if (e) e[i] = g.dentropy;
  }
}

void cpu_value_token_grads(Backend&, const Tensor& dvalue, const Tensor& value, const Tensor& rows,
                           const ValueTerms& terms) {
  const int64_t n = value.numel();
  const float* v = value.f32();  // (n)
  const float* r = rows.f32();   // (n, 3)
  float* d = dvalue.f32();       // (n)
  for (int64_t i = 0; i < n; ++i) d[i] = value_token_grad(v[i], r + i * kValueRowWidth, terms);
}

}  // namespace sbp
