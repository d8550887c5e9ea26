#include "core/checked_math.h"

#include <string>

#include "core/error.h"

namespace sbp {

void throw_size_overflow(std::string_view what, std::string_view expr) {
  throw InputError("size overflow: " + std::string(what) + " (" + std::string(expr) +
                   ") does not fit in 64-bit signed arithmetic");
}

int64_t checked_product(std::span<const int64_t> factors, std::string_view what) {
  int64_t r = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(r, f, &r)) [[unlikely]] {
      for (int64_t g : factors)
        if (g == 0) return 0;
      std::string expr;
      for (int64_t g : factors) expr += (expr.empty() ? "" : " * ") + std::to_string(g);
      throw_size_overflow(what, expr);
    }
  }
  return r;
}

}  // namespace sbp
