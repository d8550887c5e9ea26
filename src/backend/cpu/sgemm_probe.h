#pragma once
namespace sbp {
// The machine's sgemm speed: median GFLOP/s of `repeats` OpenBLAS products of n x n x n,
// with the current thread count. The yardstick for achieved-GFLOP/s figures.
double measure_sgemm_gflops(long n = 2048, int repeats = 5);
}  // namespace sbp
