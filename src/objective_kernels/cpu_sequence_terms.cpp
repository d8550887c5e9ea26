// The sequence-level objectives' gradients (sequence_token_grads), KTO's KL parts (kto_kl_part)
// and PPO's rollout rows (ppo_rollout_rows) on the CPU backends (objective_kernels.h): the
// objectives' own functions (objective/sequence_terms.h, objective/ppo_rollout.h) over a
// micro-batch's units of sequences (a step's sequences), one after another, in host memory.
#include <cstring>
#include <string>

#include "core/error.h"
#include "objective_kernels/kernel_table.h"

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

void cpu_sequence_token_grads(Backend&, const Tensor& dlogp, const Tensor& logp, const Tensor& ref,
                              const Tensor& weight, const Tensor& begin, const Tensor& label,
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

void cpu_kto_kl_part(Backend&, const Tensor& part, const Tensor& logp, const Tensor& ref,
                     const Tensor& weight, const Tensor& begin) {
  const int64_t T = logp.numel(), S = begin.numel() - 1;
  check_offsets("kto_kl_part", begin.i32(), S, T);
  const double sum = ::sbp::kto_kl_part(logp.f32(), ref.f32(), weight.f32(), begin.i32(), S, T);
  std::memcpy(part.data, &sum, sizeof sum);
}

void cpu_ppo_rollout_rows(Backend&, const Tensor& policy_rows, const Tensor& value_rows,
                          const Tensor& moments, const Tensor& logp, const Tensor& ref,
                          const Tensor& values, const Tensor& weight, const Tensor& begin,
                          const Tensor& seq, const PpoRolloutConfig& cfg) {
  const char* op = "ppo_rollout_rows";
  const int64_t T = logp.numel(), S = begin.numel() - 1;
  const int32_t* b = begin.i32();  // (S + 1)
  check_offsets(op, b, S, T);
  const float* m = weight.f32();  // (T)
  int64_t steps = 0;
  for (int64_t s = 0; s < S; ++s) {
    int64_t mine = 0;
    for (int64_t t = b[s]; t < b[s + 1]; ++t) mine += m[t] > 0.0f ? 1 : 0;
    SBP_CHECK(mine > 0, std::string(op) + ": sequence " + std::to_string(s) +
                            " has no completion row (weight > 0)");
    steps += mine;
  }
  SBP_CHECK(steps >= 2, std::string(op) + ": the whitening needs at least 2 completion rows");
  const PpoRolloutInputs in{.logp = logp.f32(),
                            .ref = ref.f32(),
                            .values = values.f32(),
                            .weight = m,
                            .begin = b,
                            .seq = seq.f32(),
                            .S = S};
  // (4, S, 2) the phases' partials, as the bytes the F32 tensor holds (8-byte aligned, checked)
  double* parts = static_cast<double*>(moments.data);
  const PpoRolloutRows out{.policy = policy_rows.f32(), .value = value_rows.f32()};
  // Each phase needs the one before it complete for every sequence: phases outside, sequences
  // inside (a step's rollout is a few loops over its rows; not worth threads).
  for (int phase = cfg.whiten_rewards ? kRewardMoments : kAdvantageMoments; phase <= kRows; ++phase)
    for (int64_t s = 0; s < S; ++s) ppo_rollout_sequence(phase, s, cfg, in, parts, out);
}

}  // namespace sbp
