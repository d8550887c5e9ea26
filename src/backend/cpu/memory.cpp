// CpuBackend's memory: ordinary host memory, one aligned allocation per tensor.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_backend.h"

namespace sbp {

void* CpuBackend::allocate_bytes(size_t bytes) { return blocks_.allocate(bytes); }

void CpuBackend::release_bytes(void* p, size_t bytes) { blocks_.release(p, bytes); }

void CpuBackend::upload_impl(void* dst, const void* host, size_t bytes) {
  std::memcpy(dst, host, bytes);
}

void CpuBackend::download_impl(void* host, const void* src, size_t bytes) {
  std::memcpy(host, src, bytes);
}

void CpuBackend::zero_impl(const Tensor& t) { std::memset(t.data, 0, t.nbytes()); }

void CpuBackend::poison_impl(const Tensor& t) { poison_host(t); }

void CpuBackend::copy_async_impl(void* dst, const void* src, size_t bytes, bool, CopyTicket) {
  const Access device(*this), host(host_);
  std::memcpy(dst, src, bytes);
}

}  // namespace sbp
