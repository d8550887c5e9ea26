#pragma once
// The two storage types of the CPU backend's float tensors, F32 and BF16, and how kernels
// written once serve every combination of them.
//
// Kernels compute in fp32 (and accumulate in fp32 or fp64) whatever the storage: BF16 is
// storage only. A kernel is a template on the storage type of each of its float tensors and
// touches their elements through two helpers:
//   load(x)      widens an element to fp32 (exact);
//   store(x, v)  writes the fp32 value v, rounded to nearest even for BF16 (core/dtype.h).
// For float both are a plain read and write, so a kernel's F32 instantiation is the F32 kernel:
// same arithmetic, same bits, same speed.
//
// with_float_data(f, t1, t2, ...) calls f(p1, p2, ...) with each pi the data of ti as float* or
// bf16*, one instantiation of f per combination of dtypes (2^k for k float tensors).
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace sbp::cpu {

// A bf16 element: the upper 16 bits of an fp32 value. A type of its own (not uint16_t) so that
// load and store overload on it.
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

inline float load(const float& x) { return x; }
inline float load(const bf16& x) { return bf16_to_f32(x.bits); }
inline void store(float& x, float v) { x = v; }
inline void store(bf16& x, float v) { x.bits = f32_to_bf16(v); }

template <class T>
constexpr bool is_bf16 = std::is_same_v<std::remove_cv_t<T>, bf16>;
// The storage type a pointer points to, without const: float or bf16.
template <class P>
using elem_t = std::remove_cv_t<std::remove_pointer_t<P>>;

// The data of a float tensor in its storage type. Only for tensors already checked to be F32 or
// BF16 (Backend's checks); the check here guards the cast.
template <class T>
T* float_data(const Tensor& t) {
  constexpr DType want = is_bf16<T> ? DType::BF16 : DType::F32;
  SBP_CHECK(t.dtype == want, "tensor is " + std::string(dtype_name(t.dtype)) + ", not " +
                                 std::string(dtype_name(want)));
  return static_cast<T*>(t.data);
}

// f(p1, ..., pk), pi = ti's data as float* or bf16*: one call of one instantiation of f.
template <class F>
void with_float_data(F&& f) {
  f();
}
template <class F, class... Rest>
void with_float_data(F&& f, const Tensor& t, const Rest&... rest) {
  // Binds t's pointer as the first argument, then the others one by one.
  auto with_first = [&](auto* p) {
    with_float_data([&](auto*... tail) { f(p, tail...); }, rest...);
  };
  if (t.dtype == DType::BF16) {
    with_first(float_data<bf16>(t));
  } else {
    with_first(float_data<float>(t));
  }
}

}  // namespace sbp::cpu
