#pragma once
// Learning-rate schedules: linear warmup, then constant, linear decay or cosine decay to
// min_lr_ratio * lr at total_steps (as transformers' get_*_schedule_with_warmup).
#include <cstdint>
#include <string>

#include "core/enum_names.h"

namespace sbp {

enum class ScheduleKind { constant, linear, cosine };
inline constexpr EnumName<ScheduleKind> kScheduleNames[] = {{ScheduleKind::constant, "constant"},
                                                            {ScheduleKind::linear, "linear"},
                                                            {ScheduleKind::cosine, "cosine"}};

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::constant;
  double lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;

  // Learning rate of optimizer step `step` (1-based).
  double at(int64_t step) const;
  // Throws InputError naming the field for negative values.
  void validate(const std::string& where) const;
};

}  // namespace sbp
