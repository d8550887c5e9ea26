#include "core/error.h"

namespace sbp {

void fail_check(const char* cond, const char* file, int line, const std::string& msg) {
  throw ShapeError(std::string(file) + ":" + std::to_string(line) + ": check failed (" + cond +
                   "): " + msg);
}

}  // namespace sbp
