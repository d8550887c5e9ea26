// The sequence-level objectives' gradients on the CUDA backend (sequence_token_grads of
// objective_kernels.h): one thread per unit
// of sequences (a DPO/ORPO pair, a KTO sequence), each running the objectives' own function
// (objective/sequence_terms.h sequence_unit_grads, SBP_HD) over its sequences' rows: sums in fp64
// in row order, the formula, then the rows' gradients. A micro-batch has a handful of units, so the
// kernel is a few threads, each a loop over its rows; it runs once per micro-batch, after the
// pre-pass, instead of the host's read of the pre-pass and upload of the gradients.
// KTO's KL parts (kto_kl_part): one thread, kto_kl_part over the micro-batch's KL
// pairs, so that the step's KL estimate stays on the device until the gradient pass reads it.
// PPO's rollout rows (ppo_rollout_rows): one thread per sequence of the step, running
// objective/ppo_rollout.h's ppo_rollout_sequence, one launch per phase (the whitenings need every
// sequence's partial of the phase before).
// Compiled into the CUDA library (CMakeLists.txt), which is why it may see backend/cuda/
// (cmake/layers.cmake's exceptions); every launch is on the backend's stream.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"
#include "objective_kernels/kernel_table.h"

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

void cuda_sequence_token_grads(Backend& be, const Tensor& dlogp, const Tensor& logp,
                               const Tensor& ref, const Tensor& weight, const Tensor& begin,
                               const Tensor& label, const SequenceTerms& terms,
                               const Tensor& kl_parts) {
  const int64_t units = (begin.numel() - 1) / sequences_per_unit(terms);
  if (units == 0) return;
  // The parts' bytes as doubles (check_double_parts in objective_kernels.cpp: 8-byte aligned).
  const double* parts =
      kl_parts.defined() ? reinterpret_cast<const double*>(kl_parts.f32()) : nullptr;
  SBP_LAUNCH(sequence_token_grads_kernel, cuda::grid_for(units, kThreads), kThreads, 0,
             static_cast<CudaBackend&>(be).stream(), dlogp.f32(), logp.f32(),
             ref.defined() ? ref.f32() : nullptr, weight.f32(), begin.i32(),
             label.defined() ? label.f32() : nullptr, logp.numel(), units, parts,
             kl_parts.defined() ? kl_parts.numel() / 2 : int64_t{0}, terms);
}

void cuda_kto_kl_part(Backend& be, const Tensor& part, const Tensor& logp, const Tensor& ref,
                      const Tensor& weight, const Tensor& begin) {
  SBP_LAUNCH(kto_kl_part_kernel, 1, 1, 0, static_cast<CudaBackend&>(be).stream(),
             reinterpret_cast<double*>(part.f32()), logp.f32(), ref.f32(), weight.f32(),
             begin.i32(), begin.numel() - 1, logp.numel());
}

void cuda_ppo_rollout_rows(Backend& be, const Tensor& policy_rows, const Tensor& value_rows,
                           const Tensor& moments, const Tensor& logp, const Tensor& ref,
                           const Tensor& values, const Tensor& weight, const Tensor& begin,
                           const Tensor& seq, const PpoRolloutConfig& cfg) {
  const int64_t S = begin.numel() - 1;
  // A GPU does not read the offsets and the completion rows back: the caller's (objective/gae.h
  // check_ppo_rollout), as the contract says.
  const PpoRolloutInputs in{.logp = logp.f32(),
                            .ref = ref.f32(),
                            .values = values.f32(),
                            .weight = weight.f32(),
                            .begin = begin.i32(),
                            .seq = seq.f32(),
                            .S = S};
  const PpoRolloutRows out{.policy = policy_rows.f32(), .value = value_rows.f32()};
  double* parts = reinterpret_cast<double*>(moments.f32());  // check_double_parts: aligned
  const cudaStream_t stream = static_cast<CudaBackend&>(be).stream();
  for (int phase = cfg.whiten_rewards ? kRewardMoments : kAdvantageMoments; phase <= kRows; ++phase)
    SBP_LAUNCH(ppo_rollout_kernel, cuda::grid_for(S, kThreads), kThreads, 0, stream, phase, cfg, in,
               parts, out);
}

}  // namespace sbp
