#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace sbp {

double LrSchedule::at(int64_t step) const {
  const int64_t s = step - 1;  // transformers counts from 0
  if (warmup_steps > 0 && s < warmup_steps)
    return lr * static_cast<double>(s + 1) / static_cast<double>(warmup_steps);
  if (kind == ScheduleKind::constant) return lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(s - warmup_steps) / span, 0.0, 1.0);
  double factor = 1.0;
  if (kind == ScheduleKind::linear)
    factor = 1.0 - progress;
  else if (kind == ScheduleKind::cosine)
    factor = 0.5 * (1.0 + std::cos(M_PI * progress));
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * factor);
}

void LrSchedule::validate(const std::string& where) const {
  if (!(lr >= 0.0)) throw InputError(where + ": learning rate must be >= 0");
  if (warmup_steps < 0) throw InputError(where + ": warmup steps must be >= 0");
  if (min_lr_ratio < 0.0 || min_lr_ratio > 1.0)
    throw InputError(where + ": min_lr_ratio must be in [0, 1]");
}

}  // namespace sbp
