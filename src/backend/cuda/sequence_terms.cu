// The sequence-level objectives' gradients (Backend::sequence_token_grads): one thread per unit
// of sequences (a DPO/ORPO pair, a KTO sequence), each running the objectives' own function
// (core/sequence_terms.h sequence_unit_grads, SBP_HD) over its sequences' rows: sums in fp64 in
// row order, the formula, then the rows' gradients. A micro-batch has a handful of units, so the
// kernel is a few threads, each a loop over its rows; it runs once per micro-batch, after the
// pre-pass, instead of the host's read of the pre-pass and upload of the gradients.
// KTO's KL parts (Backend::kto_kl_part): one thread, kto_kl_part over the micro-batch's KL
// pairs, so that the step's KL estimate stays on the device until the gradient pass reads it.
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

}  // namespace sbp
