#pragma once
// The BLAS the CPU backend multiplies with, chosen when the build is configured (CMake
// STREAMBP_BLAS = openblas | blis | mkl; README "Build"). Only sgemm is called, through the
// CBLAS interface every provider exports; what differs is the header, the integer type of the
// sizes (int in every build we make: LP64) and how the provider is told its thread count.
// Only the sources of the `streambp_blas` object library (CMakeLists.txt) include this, so a
// build for another provider recompiles those few files and nothing else.
#if defined(STREAMBP_BLAS_MKL)
#include <mkl_cblas.h>
#else
#include <cblas.h>  // OpenBLAS's or BLIS's, from the chosen provider's include directory
#endif

#include "backend/cpu/blas_info.h"

namespace sbp::cpu {

// Runs the provider's sgemm on n >= 1 threads. Every provider we build shares GNU OpenMP with
// our own kernels (OpenBLAS and BLIS: their OpenMP builds; MKL: its gnu_thread layer), so the
// BLAS and the kernels run in one thread pool; BLIS still needs telling, as it does not read
// omp_get_max_threads().
void blas_set_threads(int n);

}  // namespace sbp::cpu
