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
