#pragma once
// The training loop's progress line on stderr (the trainer's and the demo's): redrawn in place on
// a terminal; elsewhere (logs, CI) a line every ~5% of the run and at every evaluation. A resumed
// run starts at step k > 0: the ETA uses only the steps this process ran.
#include <chrono>
#include <cstdint>
#include <string>

namespace sbp {

class StepProgress {
 public:
  StepProgress(int64_t first_step, int64_t total_steps);
  // "[####......] step 40/60 | <fields> | 0.21 s/step | ETA 4s"; force_line: always print.
  void update(int64_t step, const std::string& fields, bool force_line = false);
  void finish();  // ends a line redrawn in place

 private:
  int64_t first_, total_;
  int64_t every_;  // non-terminal: print every this many steps
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  size_t last_width_ = 0;
};

std::string format_duration(double seconds);  // "3m05s", "42s", "1h02m"

}  // namespace sbp
