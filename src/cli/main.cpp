// The `streambp` program: dispatches to the subcommands in cli/cmd_*.cpp (cli/run_cli.h).
#include <malloc.h>

#include "backend/blas_core_check.h"
#include "cli/run_cli.h"

int main(int argc, char** argv) {
  // First: OpenBLAS's generic fallback on a CPU it does not know is corrected by re-executing
  // with OPENBLAS_CORETYPE set, before any kernel runs (blas_core_check.h).
  sbp::cpu::choose_blas_core(argv);
  // Every buffer of 128 KiB or more gets its own mapping and goes back to the system when
  // freed. glibc would otherwise raise this threshold after the first large free and serve
  // later buffers from the heap, where freed memory stays resident: the process would then
  // use more memory than the ledger (and `streambp plan`) accounts for. Tensors are reused
  // instead by the backends' block cache, which stays within the ledger's high-water mark
  // (backend/host_block_cache.h).
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  return sbp::cli::run_cli(argc, argv);
}
