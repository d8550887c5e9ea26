#pragma once
// Between the emulated runtime's parts (runtime.cpp, scheduler.cpp, cublaslt.cpp); not for the
// backend.
#include <functional>
#include <stdexcept>
#include <string>

#include "device.h"

namespace sbp::cudaemu {

// A fault inside a kernel or library call: becomes the context's sticky error.
struct KernelFault : std::runtime_error {
  int error;
  KernelFault(int e, const std::string& what) : std::runtime_error(what), error(e) {}
};

// Runs one launch, block after block (scheduler.cpp).
void run_kernel(const char* name, dim3 grid, dim3 block, size_t smem,
                const std::function<void()>& body);
// Appends work to the queue (runtime.cpp); it runs at the next host wait.
void enqueue_op(const char* name, std::function<void()> run);
// Whether [p, p + bytes) lies in one cudaMalloc allocation.
bool device_range(const void* p, size_t bytes);
// Runs the queue.
void drain();
// Runs the queue for an emulated NCCL collective (nccl.h): counted as a collective run, not as
// a host wait.
void run_collectives();

}  // namespace sbp::cudaemu
