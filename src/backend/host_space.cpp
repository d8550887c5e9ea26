#include "backend/host_space.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sbp {

void* PlainHostSpace::allocate_bytes(size_t bytes) { return blocks_.allocate(bytes); }

void PlainHostSpace::release_bytes(void* p, size_t bytes) { blocks_.release(p, bytes); }

void PlainHostSpace::upload_impl(void* dst, const void* host, size_t bytes) {
  std::memcpy(dst, host, bytes);
}

void PlainHostSpace::download_impl(void* host, const void* src, size_t bytes) {
  std::memcpy(host, src, bytes);
}

void PlainHostSpace::zero_impl(const Tensor& t) { std::memset(t.data, 0, t.nbytes()); }

void PlainHostSpace::poison_impl(const Tensor& t) { poison_host(t); }

void poison_host(const Tensor& t) {
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
