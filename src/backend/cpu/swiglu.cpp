// SwiGLU: out = silu(gate) * up, silu(z) = z * sigmoid(z).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/vec_math.h"

namespace sbp {

void CpuBackend::swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const int64_t n = out.numel();
  float* po = out.f32();
  const float* pg = gate.f32();
  const float* pu = up.f32();
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float z = pg[i];
    const float sig = 1.0f / (1.0f + cpu::exp_f32(-z));
    po[i] = z * sig * pu[i];
  }
}

void CpuBackend::swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                      const Tensor& gate, const Tensor& up) {
  // d silu(z)/dz = sig(z) * (1 + z * (1 - sig(z)))
  const int64_t n = dout.numel();
  float* pdg = dgate.f32();
  float* pdu = dup.f32();
  const float* pdo = dout.f32();
  const float* pg = gate.f32();
  const float* pu = up.f32();
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float z = pg[i];
    const float sig = 1.0f / (1.0f + cpu::exp_f32(-z));
    const float silu = z * sig;
    pdu[i] += pdo[i] * silu;
    pdg[i] += pdo[i] * pu[i] * sig * (1.0f + z * (1.0f - sig));
  }
}

}  // namespace sbp
