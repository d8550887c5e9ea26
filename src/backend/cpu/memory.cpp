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

void CpuBackend::poison_impl(const Tensor& t) {
  if (t.dtype == DType::F32) {
    float* f = static_cast<float*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) f[i] = NAN;
  } else if (t.dtype == DType::BF16 || t.dtype == DType::F16) {
    uint16_t* h = static_cast<uint16_t*>(t.data);
    const uint16_t nan = t.dtype == DType::BF16 ? 0x7fc0 : 0x7e00;
    for (int64_t i = 0; i < t.numel(); ++i) h[i] = nan;
  }
}

}  // namespace sbp
