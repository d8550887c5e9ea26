#pragma once
// The objectives' kernels of one kind of backend: the implementations of objective_kernels.h's
// calls, called with checked arguments inside the backend's op scope (Backend::run_extension).
// One const table per kind (objective_kernels.cpp), chosen by Backend::kind(); the shape-only
// backend has none (its ops compute nothing). Adding an objective's kernel: a field here, its
// CPU function (cpu_*.cpp) and its CUDA one (cuda/*.cu), and the call that checks it.
#include "backend/backend.h"
#include "core/tensor.h"
#include "objective/policy_terms.h"
#include "objective/ppo_rollout.h"
#include "objective/sequence_terms.h"

namespace sbp {

struct ObjectiveKernels {
  void (*policy_token_grads)(Backend& be, const Tensor& dlogp, const Tensor& dentropy,
                             const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                             const Tensor& ref);
  void (*value_token_grads)(Backend& be, const Tensor& dvalue, const Tensor& value,
                            const Tensor& rows, const ValueTerms& terms);
  void (*sequence_token_grads)(Backend& be, const Tensor& dlogp, const Tensor& logp,
                               const Tensor& ref, const Tensor& weight, const Tensor& begin,
                               const Tensor& label, const SequenceTerms& terms,
                               const Tensor& kl_parts);
  void (*kto_kl_part)(Backend& be, const Tensor& part, const Tensor& logp, const Tensor& ref,
                      const Tensor& weight, const Tensor& begin);
  void (*ppo_rollout_rows)(Backend& be, const Tensor& policy_rows, const Tensor& value_rows,
                           const Tensor& moments, const Tensor& logp, const Tensor& ref,
                           const Tensor& values, const Tensor& weight, const Tensor& begin,
                           const Tensor& seq, const PpoRolloutConfig& cfg);
};

// The CPU backends' (cpu_policy_terms.cpp, cpu_sequence_terms.cpp): loops over host memory.
void cpu_policy_token_grads(Backend& be, const Tensor& dlogp, const Tensor& dentropy,
                            const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                            const Tensor& ref);
void cpu_value_token_grads(Backend& be, const Tensor& dvalue, const Tensor& value,
                           const Tensor& rows, const ValueTerms& terms);
void cpu_sequence_token_grads(Backend& be, const Tensor& dlogp, const Tensor& logp,
                              const Tensor& ref, const Tensor& weight, const Tensor& begin,
                              const Tensor& label, const SequenceTerms& terms,
                              const Tensor& kl_parts);
void cpu_kto_kl_part(Backend& be, const Tensor& part, const Tensor& logp, const Tensor& ref,
                     const Tensor& weight, const Tensor& begin);
void cpu_ppo_rollout_rows(Backend& be, const Tensor& policy_rows, const Tensor& value_rows,
                          const Tensor& moments, const Tensor& logp, const Tensor& ref,
                          const Tensor& values, const Tensor& weight, const Tensor& begin,
                          const Tensor& seq, const PpoRolloutConfig& cfg);

// The CUDA backend's (cuda/*.cu, compiled into the CUDA library since they launch on the
// backend's stream; defined only in builds with the CUDA backend, real or emulated).
void cuda_policy_token_grads(Backend& be, const Tensor& dlogp, const Tensor& dentropy,
                             const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                             const Tensor& ref);
void cuda_value_token_grads(Backend& be, const Tensor& dvalue, const Tensor& value,
                            const Tensor& rows, const ValueTerms& terms);
void cuda_sequence_token_grads(Backend& be, const Tensor& dlogp, const Tensor& logp,
                               const Tensor& ref, const Tensor& weight, const Tensor& begin,
                               const Tensor& label, const SequenceTerms& terms,
                               const Tensor& kl_parts);
void cuda_kto_kl_part(Backend& be, const Tensor& part, const Tensor& logp, const Tensor& ref,
                      const Tensor& weight, const Tensor& begin);
void cuda_ppo_rollout_rows(Backend& be, const Tensor& policy_rows, const Tensor& value_rows,
                           const Tensor& moments, const Tensor& logp, const Tensor& ref,
                           const Tensor& values, const Tensor& weight, const Tensor& begin,
                           const Tensor& seq, const PpoRolloutConfig& cfg);

}  // namespace sbp
