#pragma once
// Checked size arithmetic. Sizes come from untrusted numbers (config.json dimensions, shapes in
// a safetensors header, --seq-len): their products can leave int64, where signed overflow is
// undefined behaviour and in practice a wrapped, negative or tiny size that a kernel or the
// allocator then trusts. Every product or sum of such sizes goes through these helpers, which
// throw InputError naming the quantity and its operands instead.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace sbp {

// Throws InputError: "size overflow: <what> (<expr>) does not fit in 64-bit signed arithmetic".
[[noreturn]] void throw_size_overflow(std::string_view what, std::string_view expr);

// a * b and a + b, or InputError naming `what` ("the element count of q_proj", ...).
// __builtin_*_overflow is one instruction and a never-taken branch: cheap enough for every
// Shape::numel.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) [[unlikely]]
    throw_size_overflow(what, std::to_string(a) + " * " + std::to_string(b));
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) [[unlikely]]
    throw_size_overflow(what, std::to_string(a) + " + " + std::to_string(b));
  return r;
}

// The product of all factors (1 for none), or InputError listing every factor. Exact: it throws
// only when the true product does not fit (a zero factor makes it 0 whatever the others are).
int64_t checked_product(std::span<const int64_t> factors, std::string_view what);
inline int64_t checked_product(std::initializer_list<int64_t> factors, std::string_view what) {
  return checked_product(std::span<const int64_t>(factors.begin(), factors.size()), what);
}

}  // namespace sbp
