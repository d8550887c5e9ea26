// The sequence-level objectives' gradients (Backend::sequence_token_grads) and KTO's KL parts
// (Backend::kto_kl_part): the objectives' own functions (core/sequence_terms.h) over a
// micro-batch's units of sequences, one after another.
#include <cstring>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace sbp {

namespace {

// The host can read the offsets: a bad one is the caller's error, said here, not clamped.
void check_offsets(const char* op, const int32_t* b, int64_t S, int64_t T) {
  SBP_CHECK(b[0] == 0 && b[S] == T,
            std::string(op) + ": begin must run from 0 to T = " + std::to_string(T));
  for (int64_t s = 0; s < S; ++s)
    SBP_CHECK(b[s] <= b[s + 1], std::string(op) + ": begin[" + std::to_string(s + 1) +
                                    "] = " + std::to_string(b[s + 1]) + " is below begin[" +
                                    std::to_string(s) + "]");
}

}  // namespace

void CpuBackend::sequence_token_grads_impl(const Tensor& dlogp, const Tensor& logp,
                                           const Tensor& ref, const Tensor& weight,
                                           const Tensor& begin, const Tensor& label,
                                           const SequenceTerms& terms, const Tensor& kl_parts) {
  const int64_t T = logp.numel(), S = begin.numel() - 1;
  const int32_t* b = begin.i32();  // (S + 1)
  check_offsets("sequence_token_grads", b, S, T);
  const float* l = label.defined() ? label.f32() : nullptr;  // (S) or none
  for (int64_t s = 0; l && s < S; ++s)
    SBP_CHECK(l[s] == 0.0f || l[s] == 1.0f,
              "sequence_token_grads: label " + std::to_string(s) + " is not 0 or 1");
  // (P) the KL estimate's parts, as the bytes the F32 tensor holds (check_double_parts: 8-byte
  // aligned).
  const double* parts = kl_parts.defined() ? static_cast<const double*>(kl_parts.data) : nullptr;
  const int64_t P = kl_parts.defined() ? kl_parts.numel() / 2 : 0;
  const int64_t units = S / sequences_per_unit(terms);
  // A micro-batch's pairs: a handful, each a loop over its rows; not worth threads.
  for (int64_t u = 0; u < units; ++u)
    sequence_unit_grads(terms, u, logp.f32(), ref.defined() ? ref.f32() : nullptr, weight.f32(), b,
                        l, T, parts, P, dlogp.f32());
}

void CpuBackend::kto_kl_part_impl(const Tensor& part, const Tensor& logp, const Tensor& ref,
                                  const Tensor& weight, const Tensor& begin) {
  const int64_t T = logp.numel(), S = begin.numel() - 1;
  check_offsets("kto_kl_part", begin.i32(), S, T);
  const double sum = ::sbp::kto_kl_part(logp.f32(), ref.f32(), weight.f32(), begin.i32(), S, T);
  std::memcpy(part.data, &sum, sizeof sum);
}

}  // namespace sbp
