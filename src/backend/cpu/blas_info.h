#pragma once
// Which BLAS the build multiplies with and which kernels it chose for this CPU, without the
// provider's header (blas.h): for the code that reports them (blas_core_check.h, bench).
namespace sbp::cpu {

// "openblas", "blis" or "mkl".
const char* blas_provider();
// The kernel set the provider chose for this CPU: OpenBLAS's core name ("SkylakeX", "Haswell",
// "Zen", "Prescott", ...), BLIS's architecture ("skx", "zen3", "generic", ...); "" for MKL,
// which dispatches per call and names no core.
const char* blas_core();

}  // namespace sbp::cpu
