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
// Bytes the provider holds in a memory pool of its own, outside the ledger: MKL's memory
// manager keeps the buffers it frees for reuse (mkl_mem_stat); 0 for OpenBLAS and BLIS, whose
// buffers are allocated once per thread when the library starts. Read by the tests that
// compare resident memory with the plan (plan_rss_slow_test).
long long blas_pool_bytes();

}  // namespace sbp::cpu
