#include "backend/cpu/blas.h"

#if defined(STREAMBP_BLAS_BLIS)
#include <blis.h>
#elif defined(STREAMBP_BLAS_MKL)
#include <mkl_service.h>
#endif

namespace sbp::cpu {

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
