// The policy-gradient objectives' per-token gradients (Backend::policy_token_grads and
// value_token_grads): the objectives' own formulas (core/policy_terms.h) over the rows of one
// head block.
#include "backend/cpu/cpu_backend.h"

namespace sbp {

void CpuBackend::policy_token_grads_impl(const Tensor& dlogp, const Tensor& dentropy,
                                         const Tensor& logp, const Tensor& rows,
                                         const PolicyTerms& terms, const Tensor& ref) {
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

void CpuBackend::value_token_grads_impl(const Tensor& dvalue, const Tensor& value,
                                        const Tensor& rows, const ValueTerms& terms) {
  const int64_t n = value.numel();
  const float* v = value.f32();  // (n)
  const float* r = rows.f32();   // (n, 3)
  float* d = dvalue.f32();       // (n)
  for (int64_t i = 0; i < n; ++i) d[i] = value_token_grad(v[i], r + i * kValueRowWidth, terms);
}

}  // namespace sbp
