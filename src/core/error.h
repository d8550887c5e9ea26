#pragma once
// Error types. Every error carries a message that says what went wrong and where
// (file, line, field); the CLI prints it on one line and exits non-zero.
#include <stdexcept>
#include <string>

namespace sbp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad input from a file or the command line (the message names the file/line/field).
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(what) {}
};

// Training cannot go on (a non-finite loss or gradient norm): the message names the step.
class TrainingStopped : public Error {
 public:
  using Error::Error;
};

// Internal contract violated (a bug): shapes that cannot match, wrong dtype, ...
class ShapeError : public Error {
 public:
  explicit ShapeError(const std::string& what) : Error(what) {}
};

[[noreturn]] void fail_check(const char* cond, const char* file, int line, const std::string& msg);

}  // namespace sbp

// Checks that stay on in release builds: they guard shapes at kernel entry, which is cheap.
#define SBP_CHECK(cond, msg)                                          \
  do {                                                                \
    if (!(cond)) ::sbp::fail_check(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
