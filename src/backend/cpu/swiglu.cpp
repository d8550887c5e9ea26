// SwiGLU: out = silu(gate) * up, silu(z) = z * sigmoid(z). Every tensor may be F32 or BF16
// (storage.h); computed in fp32.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"
#include "backend/cpu/vec_math.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

template <class TO, class TG, class TU>
void swiglu_forward_kernel(TO* po, const TG* pg, const TU* pu, int64_t n) {  // all (n)
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float z = load(pg[i]);
    const float sig = 1.0f / (1.0f + cpu::exp_f32(-z));
    store(po[i], z * sig * load(pu[i]));
  }
}

// d silu(z)/dz = sig(z) * (1 + z * (1 - sig(z)))
template <class TDG, class TDU, class TDO, class TG, class TU>
void swiglu_backward_kernel(TDG* pdg, TDU* pdu, const TDO* pdo, const TG* pg, const TU* pu,
                            int64_t n) {  // all (n)
#pragma omp parallel for simd schedule(static) if (n > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float z = load(pg[i]);
    const float sig = 1.0f / (1.0f + cpu::exp_f32(-z));
    const float silu = z * sig;
    store(pdu[i], load(pdu[i]) + load(pdo[i]) * silu);
    store(pdg[i], load(pdg[i]) + load(pdo[i]) * load(pu[i]) * sig * (1.0f + z * (1.0f - sig)));
  }
}

}  // namespace

void CpuBackend::swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) {
  cpu::with_float_data([&](auto* po, const auto* pg,
                           const auto* pu) { swiglu_forward_kernel(po, pg, pu, out.numel()); },
                       out, gate, up);
}

void CpuBackend::swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                      const Tensor& gate, const Tensor& up) {
  cpu::with_float_data(
      [&](auto* pdg, auto* pdu, const auto* pdo, const auto* pg, const auto* pu) {
        swiglu_backward_kernel(pdg, pdu, pdo, pg, pu, dout.numel());
      },
      dgate, dup, dout, gate, up);
}

}  // namespace sbp
