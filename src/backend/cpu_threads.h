#pragma once
// The CPU backend's thread count, as the layers above the backend interface set it (train,
// demo, the commands): they must not include a concrete backend's header (the layering rule,
// cmake/layers.cmake), and the count is a property of the process, not of one backend object.
// Defined in backend/cpu/cpu_backend.cpp.

namespace sbp {

// Sets the thread count of OpenMP (0 = leave it as is) and tells the BLAS (blas.h) the same.
void set_cpu_threads(int threads);
int cpu_threads();

}  // namespace sbp
