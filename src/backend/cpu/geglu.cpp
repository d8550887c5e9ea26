// GeGLU (Gemma's MLP): out = gelu_tanh(gate) * up, with PyTorch's tanh approximation
// gelu_tanh(z) = 0.5 z (1 + tanh(u)), u = sqrt(2/pi) (z + 0.044715 z^3). Every tensor may be
// F32 or BF16 (storage.h); computed in fp32.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;

template <class TO, class TG, class TU>
void geglu_forward_kernel(TO* po, const TG* pg, const TU* pu, int64_t n) {  // all (n)
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float z = load(pg[i]);
    const float t = std::tanh(kSqrt2OverPi * (z + kCubic * z * z * z));
    store(po[i], 0.5f * z * (1.0f + t) * load(pu[i]));
  }
}

// d gelu_tanh(z)/dz = 0.5 (1 + t) + 0.5 z (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 z^2)
template <class TDG, class TDU, class TDO, class TG, class TU>
void geglu_backward_kernel(TDG* pdg, TDU* pdu, const TDO* pdo, const TG* pg, const TU* pu,
                           int64_t n) {  // all (n)
#pragma omp parallel for schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float z = load(pg[i]);
    const float t = std::tanh(kSqrt2OverPi * (z + kCubic * z * z * z));
    const float gelu = 0.5f * z * (1.0f + t);
    const float dgelu =
        0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * z * z);
    const float dout = load(pdo[i]);
    store(pdu[i], load(pdu[i]) + dout * gelu);
    store(pdg[i], load(pdg[i]) + dout * load(pu[i]) * dgelu);
  }
}

}  // namespace

void CpuBackend::geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  cpu::with_float_data([&](auto* po, const auto* pg,
                           const auto* pu) { geglu_forward_kernel(po, pg, pu, out.numel()); },
                       out, gate, up);
}

void CpuBackend::geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                     const Tensor& gate, const Tensor& up) {
  cpu::with_float_data(
      [&](auto* pdg, auto* pdu, const auto* pdo, const auto* pg, const auto* pu) {
        geglu_backward_kernel(pdg, pdu, pdo, pg, pu, dout.numel());
      },
      dgate, dup, dout, gate, up);
}

}  // namespace sbp
