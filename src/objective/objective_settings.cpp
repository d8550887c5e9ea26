#include "objective/objective_settings.h"

#include <cmath>
#include <cstdio>

namespace sbp {

bool within(const SettingBound& b, double v) {
  const bool above = b.lo_open ? v > b.lo : v >= b.lo;
  const bool below = b.hi_open ? v < b.hi : v <= b.hi;
  return above && below;  // NaN is neither
}

std::string bound_text(const SettingBound& b) {
  char buf[100];
  if (std::isinf(b.hi) && b.lo == 0.0 && b.lo_open)
    std::snprintf(buf, sizeof buf, "must be positive");
  else if (std::isinf(b.hi))
    std::snprintf(buf, sizeof buf, "must be %s %g", b.lo_open ? ">" : ">=", b.lo);
  else
    std::snprintf(buf, sizeof buf, "must be in %c%g, %g%c", b.lo_open ? '(' : '[', b.lo, b.hi,
                  b.hi_open ? ')' : ']');
  return buf;
}

}  // namespace sbp
