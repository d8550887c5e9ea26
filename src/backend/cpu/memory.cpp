// CpuBackend's memory: ordinary host memory, one aligned allocation per tensor.
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_backend.h"

namespace sbp {

namespace {
constexpr size_t kAlignment = 64;  // one cache line; also enough for AVX-512 loads
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

void* CpuBackend::allocate_bytes(size_t bytes) {
  return std::aligned_alloc(kAlignment, round_up(bytes, kAlignment));
}

void CpuBackend::release_bytes(void* p, size_t) { std::free(p); }

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
