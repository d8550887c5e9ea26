#pragma once
namespace sbp {
// The machine's sgemm speed: median GFLOP/s of `repeats` products of n x n x n by the configured
// BLAS (backend/cpu/blas.h), with the current thread count. The yardstick for achieved-GFLOP/s
// figures.
double measure_sgemm_gflops(long n = 2048, int repeats = 5);
}  // namespace sbp
