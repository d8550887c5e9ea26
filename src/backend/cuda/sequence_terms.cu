// The sequence-level objectives' gradients (Backend::sequence_token_grads): one thread per unit
// of sequences (a DPO/ORPO pair, a KTO sequence), each running the objectives' own function
// (core/sequence_terms.h sequence_unit_grads, SBP_HD) over its sequences' rows: sums in fp64 in
// row order, the formula, then the rows' gradients. A micro-batch has a handful of units, so the
// kernel is a few threads, each a loop over its rows; it runs once per micro-batch, after the
// pre-pass, instead of the host's read of the pre-pass and upload of the gradients.
// KTO's KL parts (Backend::kto_kl_part): one thread, kto_kl_part over the micro-batch's KL
// pairs, so that the step's KL estimate stays on the device until the gradient pass reads it.
// PPO's rollout rows (Backend::ppo_rollout_rows): one thread per sequence of the step, running
// core/ppo_rollout.h's ppo_rollout_sequence, one launch per phase (the whitenings need every
// sequence's partial of the phase before).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {

constexpr int kThreads = 64;

__global__ void sequence_token_grads_kernel(float* dlogp, const float* logp, const float* ref,
                                            const float* weight, const int32_t* begin,
                                            const float* label, int64_t T, int64_t units,
                                            const double* kl_parts, int64_t P,
                                            SequenceTerms terms) {
  const int64_t u = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (u >= units) return;
  sequence_unit_grads(terms, u, logp, ref, weight, begin, label, T, kl_parts, P, dlogp);
}

// One thread per sequence; phase by phase, each launch after the last one's partials.
__global__ void ppo_rollout_kernel(int phase, PpoRolloutConfig cfg, PpoRolloutInputs in,
                                   double* moments, PpoRolloutRows out) {
  const int64_t s = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (s >= in.S) return;
  ppo_rollout_sequence(phase, s, cfg, in, moments, out);
}

__global__ void kto_kl_part_kernel(double* part, const float* logp, const float* ref,
                                   const float* weight, const int32_t* begin, int64_t S,
                                   int64_t T) {
  *part = kto_kl_part(logp, ref, weight, begin, S, T);
}

}  // namespace

void CudaBackend::sequence_token_grads_impl(const Tensor& dlogp, const Tensor& logp,
                                            const Tensor& ref, const Tensor& weight,
                                            const Tensor& begin, const Tensor& label,
                                            const SequenceTerms& terms, const Tensor& kl_parts) {
  const int64_t units = (begin.numel() - 1) / sequences_per_unit(terms);
  if (units == 0) return;
  // The parts' bytes as doubles (Backend::check_double_parts: 8-byte aligned).
  const double* parts =
      kl_parts.defined() ? reinterpret_cast<const double*>(kl_parts.f32()) : nullptr;
  SBP_LAUNCH(sequence_token_grads_kernel, cuda::grid_for(units, kThreads), kThreads, 0, stream_,
             dlogp.f32(), logp.f32(), ref.defined() ? ref.f32() : nullptr, weight.f32(),
             begin.i32(), label.defined() ? label.f32() : nullptr, logp.numel(), units, parts,
             kl_parts.defined() ? kl_parts.numel() / 2 : int64_t{0}, terms);
}

void CudaBackend::kto_kl_part_impl(const Tensor& part, const Tensor& logp, const Tensor& ref,
                                   const Tensor& weight, const Tensor& begin) {
  SBP_LAUNCH(kto_kl_part_kernel, 1, 1, 0, stream_, reinterpret_cast<double*>(part.f32()),
             logp.f32(), ref.f32(), weight.f32(), begin.i32(), begin.numel() - 1, logp.numel());
}

void CudaBackend::ppo_rollout_rows_impl(const Tensor& policy_rows, const Tensor& value_rows,
                                        const Tensor& moments, const Tensor& logp,
                                        const Tensor& ref, const Tensor& values,
                                        const Tensor& weight, const Tensor& begin,
                                        const Tensor& seq, const PpoRolloutConfig& cfg) {
  const int64_t S = begin.numel() - 1;
  // The caller checked the offsets and the completion rows (Backend::ppo_rollout_rows): a GPU
  // does not read them back.
  const PpoRolloutInputs in{.logp = logp.f32(),
                            .ref = ref.f32(),
                            .values = values.f32(),
                            .weight = weight.f32(),
                            .begin = begin.i32(),
                            .seq = seq.f32(),
                            .S = S};
  const PpoRolloutRows out{.policy = policy_rows.f32(), .value = value_rows.f32()};
  double* parts = reinterpret_cast<double*>(moments.f32());  // check_double_parts: aligned
  for (int phase = cfg.whiten_rewards ? kRewardMoments : kAdvantageMoments; phase <= kRows; ++phase)
    SBP_LAUNCH(ppo_rollout_kernel, cuda::grid_for(S, kThreads), kThreads, 0, stream_, phase, cfg,
               in, parts, out);
}

}  // namespace sbp
