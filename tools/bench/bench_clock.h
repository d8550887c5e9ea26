#pragma once
// The clock of the micro-benchmarks in tools/bench: wall time, or (--clock cpu) the process's
// CPU time divided by the threads, which a busy shared machine disturbs less.
#include <time.h>

#include <chrono>

namespace sbp::bench {

struct Clock {
  bool cpu = false;
  int threads = 1;
  double now() const {
    if (!cpu) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    }
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec)) / threads;
  }
};

}  // namespace sbp::bench
