#pragma once
// What tests can ask of and do to the emulated CUDA runtime (STREAMBP_CUDA_EMULATION builds
// only): counters, fault injection, and a reset between tests.
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

}  // namespace sbp::cudaemu
