#pragma once
// What a training run prints: rank 0 speaks; errors are thrown, and reported, on every rank.
namespace sbp {

struct RunLog {
  bool lead = true;
  void out(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));  // stdout
  void err(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));  // stderr
};

}  // namespace sbp
