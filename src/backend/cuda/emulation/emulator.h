#pragma once
// What tests can ask of and do to the emulated CUDA runtime (STREAMBP_CUDA_EMULATION builds
// only): counters, fault injection, refusals a real device may make, and a reset between tests.
#include <cstdint>
#include <string>

#include "cuda_runtime.h"

namespace sbp::cudaemu {

struct Counters {
  // Host waits for the device (stream/device/event syncs, synchronous copies, copies into
  // pageable host memory, cudaFree) that found work queued; sync_calls counts every such call.
  // STREAMBP_CUDA_EMULATION_TRACE_SYNCS=1 prints a backtrace for each counted wait.
  int64_t syncs = 0;
  int64_t sync_calls = 0;
  int64_t launches = 0;  // kernels queued
  int64_t kernels_run = 0;
  int64_t blocks_run = 0;
  int64_t collective_runs = 0;  // queue runs for emulated NCCL collectives (nccl.h)
  size_t max_dynamic_smem = 0;  // the largest dynamic shared memory a queued launch asked for
};
Counters counters();

// The next `after`-th cudaMalloc (0: the next one) returns `error` (cudaErrorMemoryAllocation:
// out of memory; any other: as a sticky fault would). One shot.
void inject_malloc_error(cudaError_t error, int after = 0);
// Makes every later call return `error`, as a fault in a kernel does (sticky). `what` is
// printed to stderr.
void inject_sticky_error(cudaError_t error, const std::string& what);
// Clears a sticky error, the opt-ins, the last error and Counters::max_dynamic_smem (the real
// runtime needs a new process; tests reset instead). Device memory stays.
void reset_errors();
// Bytes of device memory cudaMalloc hands out before it reports cudaErrorMemoryAllocation
// (default 16 GiB, or STREAMBP_CUDA_EMULATION_MEMORY in bytes).
void set_device_memory(size_t bytes);

// Refusals a real device or library may make that nothing the program can ask beforehand
// predicts. Each also has an environment variable, read at the first runtime call, for whole
// programs (streambp, gradcheck) run by scripts.
// The opt-in past the default 48 KiB is granted up to `bytes` only (cudaFuncSetAttribute above
// it, and a launch asking more than both: cudaErrorInvalidValue) while
// cudaDevAttrMaxSharedMemoryPerBlockOptin still reports 227 KiB, as for a kernel whose static
// shared memory or reserved share the attribute leaves out.
// STREAMBP_CUDA_EMULATION_MAX_SMEM=bytes. Not reset by reset_errors().
void set_max_shared_memory(size_t bytes);
// Launches of kernels whose name contains `name_part` fail with
// cudaErrorLaunchOutOfResources (too many registers for the block, say); "" refuses none.
// STREAMBP_CUDA_EMULATION_REFUSE_LAUNCH=name_part. Not reset by reset_errors().
void refuse_launches(const std::string& name_part);
// The first `n` algorithms of every cuBLASLt heuristic answer fail at cublasLtMatmul
// (CUBLAS_STATUS_NOT_SUPPORTED), as a kernel refusing an alignment or shape its heuristic entry
// did not exclude would (cublaslt.cpp). STREAMBP_CUDA_EMULATION_REFUSE_ALGOS=n. The heuristic
// offers up to 8. Not reset by reset_errors().
void set_refused_algorithms(int n);

}  // namespace sbp::cudaemu
