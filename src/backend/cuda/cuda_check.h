#pragma once
// CUDA and cuBLASLt status checks: a failed call becomes an sbp::Error naming the call and
// CUDA's own error string (no abort, so the trainer can report it like any other failure).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/gemm_describe.h"
#include "core/error.h"

namespace sbp::cuda {

// The kernel launched last by this host thread (launch.h): a fault reported by a later call
// (a copy, a sync, cudaMalloc) was most likely caused by it. Per host thread, like CUDA's own
// last-error state.
inline const char*& last_kernel() {
  thread_local const char* name = nullptr;
  return name;
}

[[noreturn]] inline void fail_cuda(cudaError_t e, const char* call, const char* file, int line) {
  const char* k = last_kernel();
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
              cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + " (last kernel launched: " +
              (k ? k : "none") + ")");
}
[[noreturn]] inline void fail_cublas(cublasStatus_t s, const char* call, const char* file,
                                     int line) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
              cublas_status_name(static_cast<int>(s)));
}

}  // namespace sbp::cuda

#define SBP_CUDA(call)                                                            \
  do {                                                                            \
    const cudaError_t sbp_e_ = (call);                                            \
    if (sbp_e_ != cudaSuccess) ::sbp::cuda::fail_cuda(sbp_e_, #call, __FILE__, __LINE__); \
  } while (0)
#define SBP_CUBLAS(call)                                                                \
  do {                                                                                  \
    const cublasStatus_t sbp_s_ = (call);                                               \
    if (sbp_s_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::sbp::cuda::fail_cublas(sbp_s_, #call, __FILE__, __LINE__);                      \
  } while (0)
// After a kernel launched without SBP_LAUNCH (launch.h): configuration errors show here,
// execution errors at the next synchronisation.
#define SBP_CUDA_LAUNCHED() SBP_CUDA(cudaGetLastError())
