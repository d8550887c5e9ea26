#include "backend/cpu/blas.h"

#if defined(STREAMBP_BLAS_BLIS)
#include <blis.h>
#elif defined(STREAMBP_BLAS_MKL)
#include <mkl_service.h>

#include <cstdlib>
#endif

namespace sbp::cpu {

#if defined(STREAMBP_BLAS_MKL)
namespace {
// MKL chooses its kernels by problem size: on an Intel AVX-512 CPU a product of fewer than ~256
// rows sums in another order than the same rows inside a larger product (x W^T, K = N = 1024:
// 940 of the 1024 elements of a one-row product differ in the last bits from that row of a
// 4096-row product; OpenBLAS: none). The engine's exactness tests compare a chunked computation
// with the whole one bit for bit, as OpenBLAS and BLIS give it (window_stream_test failed on
// MKL here). Strict CNR mode makes MKL's results independent of the row count too (0 of 1024).
// It must be set before any other MKL call, so it is set when this library is loaded; a user's
// own MKL_CBWR is kept.
int set_mkl_strict_cnr() {
  if (std::getenv("MKL_CBWR") != nullptr) return 0;
  return mkl_cbwr_set(mkl_cbwr_get_auto_branch() | MKL_CBWR_STRICT);
}
[[maybe_unused]] const int kMklStrictCnr = set_mkl_strict_cnr();
}  // namespace
#endif

const char* blas_provider() {
#if defined(STREAMBP_BLAS_BLIS)
  return "blis";
#elif defined(STREAMBP_BLAS_MKL)
  return "mkl";
#else
  return "openblas";
#endif
}

const char* blas_core() {
#if defined(STREAMBP_BLAS_BLIS)
  return bli_arch_string(bli_arch_query_id());
#elif defined(STREAMBP_BLAS_MKL)
  return "";
#else
  return openblas_get_corename();
#endif
}

long long blas_pool_bytes() {
#if defined(STREAMBP_BLAS_MKL)
  int buffers = 0;
  return static_cast<long long>(mkl_mem_stat(&buffers));
#else
  return 0;
#endif
}

void blas_set_threads(int n) {
#if defined(STREAMBP_BLAS_BLIS)
  bli_thread_set_num_threads(n);
#elif defined(STREAMBP_BLAS_MKL)
  mkl_set_num_threads(n);
#else
  openblas_set_num_threads(n);
#endif
}

}  // namespace sbp::cpu
