#include "backend/host_math.h"

#include <string>

#include "backend/backend_checks.h"
#include "backend/cpu/float_kernels.h"
#include "core/error.h"

namespace sbp {

using contract::arg;

namespace {
// The dtypes of the CPU's float kernels (storage.h).
bool is_float(DType dt) { return dt == DType::F32 || dt == DType::BF16; }
}  // namespace

bool HostMath::ready(const char* op, std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors) {
    SBP_CHECK(t->defined(), std::string("host ") + op + ": undefined tensor");
    SBP_CHECK(t->memory == &host_, std::string("host ") + op + ": tensor " + t->describe() +
                                       " is not in host memory (Backend::host_memory)");
    if (const char* busy = host_.in_flight(t->data, t->nbytes()))
      SBP_CHECK(false, std::string("host ") + op + ": tensor " + t->describe() + " " + busy);
  }
  return host_.holds_data();
}

void HostMath::fill(const Tensor& x, float value) {
  SBP_CHECK(is_float(x.dtype), arg("host fill", "x", x) + " must be F32 or BF16");
  if (!ready("fill", {&x})) return;
  const MemorySpace::Access open(host_);
  cpu::fill_floats(x, value);
}

void HostMath::copy(const Tensor& dst, const Tensor& src) {
  SBP_CHECK(is_float(dst.dtype) && is_float(src.dtype) && dst.numel() == src.numel(),
            arg("host copy", "src", src) + " -> dst " + dst.describe() +
                ": float tensors of equal numel");
  if (!ready("copy", {&dst, &src})) return;
  const MemorySpace::Access open(host_);
  cpu::copy_floats(dst, src);
}

void HostMath::add_inplace(const Tensor& y, const Tensor& x) {
  SBP_CHECK(is_float(y.dtype) && is_float(x.dtype) && y.numel() == x.numel(),
            arg("host add_inplace", "x", x) + " -> y " + y.describe() +
                ": float tensors of equal numel");
  if (!ready("add_inplace", {&y, &x})) return;
  const MemorySpace::Access open(host_);
  cpu::add_floats(y, x);
}

void HostMath::scale_inplace(const Tensor& x, float s) {
  SBP_CHECK(is_float(x.dtype), arg("host scale_inplace", "x", x) + " must be F32 or BF16");
  if (!ready("scale_inplace", {&x})) return;
  const MemorySpace::Access open(host_);
  cpu::scale_floats(x, s);
}

void HostMath::sum_squares_each(std::span<const Tensor> xs, std::span<double> out) {
  SBP_CHECK(out.size() == xs.size(), "host sum_squares: one output per tensor");
  bool data = true;
  for (const Tensor& x : xs) {
    SBP_CHECK(is_float(x.dtype), arg("host sum_squares", "x", x) + " must be F32 or BF16");
    data = ready("sum_squares", {&x});
  }
  const MemorySpace::Access open(host_);
  for (size_t i = 0; i < xs.size(); ++i) out[i] = data ? cpu::sum_squares_floats(xs[i]) : 0.0;
}

void HostMath::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const AdamWStep& s) {
  contract::check_adamw_args(param, grad, m, v, s);
  if (!ready("adamw_step", {&param, &grad, &m, &v})) return;
  const MemorySpace::Access open(host_);
  cpu::adamw_floats(param, grad, m, v, s);
}

}  // namespace sbp
