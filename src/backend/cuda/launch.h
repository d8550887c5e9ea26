#pragma once
// SBP_LAUNCH(kernel, grid, block, smem, stream, args...): every kernel launch of the backend
// goes through this macro. With nvcc it is `kernel<<<grid, block, smem, stream>>>(args...)`;
// in the emulation build (STREAMBP_CUDA_EMULATION, emulation/device.h) it queues the kernel on
// the emulated runtime. Either way it then checks the launch (configuration errors show at once,
// faults at the next synchronisation) and remembers the kernel's name for error messages.
// A kernel template is named with its arguments (column_finish_kernel<FPtr>): the emulation
// takes the kernel's address.
//
// CUDA_LAUNCH_BLOCKING=1 (read once): the device is synchronised after every launch, so that a
// fault is reported by the launch of the kernel that caused it (for diagnosis; slow).
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace sbp::cuda {

inline bool launch_blocking() {
  static const bool on = [] {
    const char* v = std::getenv("CUDA_LAUNCH_BLOCKING");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

inline void after_launch(const char* kernel, const char* file, int line) {
  last_kernel() = kernel;
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail_cuda(e, kernel, file, line);
  if (launch_blocking()) {
    const cudaError_t s = cudaDeviceSynchronize();
    if (s != cudaSuccess) fail_cuda(s, kernel, file, line);
  }
}

}  // namespace sbp::cuda

#if defined(STREAMBP_CUDA_EMULATION)
#define SBP_LAUNCH(kernel, grid, block, smem, stream, ...)                                 \
  do {                                                                                     \
    ::sbp::cudaemu::launch(#kernel, kernel, grid, block, smem, stream, __VA_ARGS__);      \
    ::sbp::cuda::after_launch(#kernel, __FILE__, __LINE__);                                \
  } while (0)
#else
#define SBP_LAUNCH(kernel, grid, block, smem, stream, ...)      \
  do {                                                          \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__);         \
    ::sbp::cuda::after_launch(#kernel, __FILE__, __LINE__);     \
  } while (0)
#endif
