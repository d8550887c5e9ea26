#pragma once
// Ctrl-C (SIGINT) and SIGTERM during training: the handler only sets a flag; the trainer checks
// it after every optimizer step, saves a checkpoint and exits with kInterruptedExitCode. A second
// signal while the checkpoint is being written ends the process at once (default action).
#include <signal.h>

namespace sbp {

constexpr int kInterruptedExitCode = 130;  // 128 + SIGINT, what shells report for Ctrl-C

// Installs the handlers (and clears the flag); the destructor of StopSignalScope restores the
// previous handlers.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

bool stop_requested();
int stop_signal_number();  // the signal that asked to stop (0: none)

}  // namespace sbp
