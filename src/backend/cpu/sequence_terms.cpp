// The sequence-level objectives' gradients (Backend::sequence_token_grads): the objectives' own
// functions (core/sequence_terms.h) over a micro-batch's units of sequences, one after another.
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace sbp {

void CpuBackend::sequence_token_grads_impl(const Tensor& dlogp, const Tensor& logp,
                                           const Tensor& ref, const Tensor& weight,
                                           const Tensor& begin, const Tensor& label,
                                           const SequenceTerms& terms) {
  const int64_t T = logp.numel(), S = begin.numel() - 1;
  const int32_t* b = begin.i32();  // (S + 1)
  // The host can read the offsets: a bad one is the caller's error, said here, not clamped.
  SBP_CHECK(b[0] == 0 && b[S] == T,
            "sequence_token_grads: begin must run from 0 to T = " + std::to_string(T));
  for (int64_t s = 0; s < S; ++s)
    SBP_CHECK(b[s] <= b[s + 1], "sequence_token_grads: begin[" + std::to_string(s + 1) +
                                    "] = " + std::to_string(b[s + 1]) + " is below begin[" +
                                    std::to_string(s) + "]");
  const float* l = label.defined() ? label.f32() : nullptr;  // (S) or none
  for (int64_t s = 0; l && s < S; ++s)
    SBP_CHECK(l[s] == 0.0f || l[s] == 1.0f,
              "sequence_token_grads: label " + std::to_string(s) + " is not 0 or 1");
  const int64_t units = S / sequences_per_unit(terms);
  // A micro-batch's pairs: a handful, each a loop over its rows; not worth threads.
  for (int64_t u = 0; u < units; ++u)
    sequence_unit_grads(terms, u, logp.f32(), ref.defined() ? ref.f32() : nullptr, weight.f32(), b,
                        l, T, dlogp.f32());
}

}  // namespace sbp
