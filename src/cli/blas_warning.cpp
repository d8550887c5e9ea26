// warn_if_generic_blas (commands.h): the BLAS core check's one line, where it applies.
#include <cstdio>

#include "backend/blas_core_check.h"
#include "cli/commands.h"

namespace sbp::cli {

void warn_if_generic_blas() {
  const std::string w = cpu::blas_core_warning(cpu::check_blas_core());
  if (!w.empty()) std::fprintf(stderr, "streambp: %s\n", w.c_str());
}

}  // namespace sbp::cli
