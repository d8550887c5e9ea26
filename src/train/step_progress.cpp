#include "train/step_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace sbp {

std::string format_duration(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

StepProgress::StepProgress(int64_t first_step, int64_t total_steps)
    : first_(first_step),
      total_(total_steps),
      every_(std::max<int64_t>(1, (total_steps - first_step) / 20)),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void StepProgress::update(int64_t step, const std::string& fields, bool force_line) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - first_;
  const double per_step = done > 0 ? elapsed / static_cast<double>(done) : 0.0;
  const double eta = per_step * static_cast<double>(total_ - step);
  const int width = 20;
  const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(static_cast<size_t>(width), '.');
  char head[96], tail[96];
  std::snprintf(head, sizeof head, "[%s] step %lld/%lld", bar.c_str(), static_cast<long long>(step),
                static_cast<long long>(total_));
  std::snprintf(tail, sizeof tail, "%.2f s/step | ETA %s", per_step, format_duration(eta).c_str());
  const std::string line = std::string(head) + " | " + fields + " | " + tail;
  if (tty_) {
    const std::string pad =
        line.size() < last_width_ ? std::string(last_width_ - line.size(), ' ') : "";
    std::fprintf(stderr, "\r%s%s", line.c_str(), pad.c_str());
    if (force_line) std::fprintf(stderr, "\n");
    last_width_ = force_line ? 0 : line.size();
  } else if (force_line || done % every_ == 0 || step == total_) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void StepProgress::finish() {
  if (tty_ && last_width_ > 0) std::fprintf(stderr, "\n");
  last_width_ = 0;
}

}  // namespace sbp
