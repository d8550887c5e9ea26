#include "core/stop_signal.h"

#include <csignal>

namespace sbp {

namespace {

// The one piece of global mutable state in the program: a signal handler can only communicate
// through an object of static storage duration, and only a volatile sig_atomic_t is safe to
// write from one. Written by the handler, read by the training loop between steps.
volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  g_stop_signal = sig;
  // The next signal takes the default action (terminate): a user pressing Ctrl-C twice does not
  // want to wait for the checkpoint.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, nullptr);
  sigaction(SIGTERM, &dfl, nullptr);
}

}  // namespace

StopSignalScope::StopSignalScope() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads/writes in progress carry on; the loop polls the flag
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignalScope::~StopSignalScope() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

bool stop_requested() { return g_stop_signal != 0; }
int stop_signal_number() { return static_cast<int>(g_stop_signal); }

}  // namespace sbp
