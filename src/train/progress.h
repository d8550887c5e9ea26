#pragma once
// A progress line on stderr: redrawn in place on a terminal, one line per update otherwise.
#include <chrono>
#include <cstdint>
#include <string>

namespace sbp {

class Progress {
 public:
  explicit Progress(int64_t total);
  // Redraws "step k/total | <fields> | s/step | ETA"; `force_line` ends the line.
  void update(int64_t step, const std::string& fields, bool force_line = false);
  void finish();

 private:
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  size_t last_width_ = 0;
};

std::string format_duration(double seconds);  // "3m05s", "42s", "1h02m"

}  // namespace sbp
