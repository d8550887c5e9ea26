#include "core/pool.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace sbp {

namespace {
constexpr size_t kAlignment = 64;  // one cache line; also enough for AVX-512 loads

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

Buffer Pool::allocate(Category c, DType dt, Shape shape) {
  const int64_t bytes = shape.numel() * static_cast<int64_t>(dtype_size(dt));
  ledger_.allocate(c, bytes);  // throws past the budget, before anything is allocated
  void* data = nullptr;
  if (opts_.materialize && bytes > 0) {
    data = std::aligned_alloc(kAlignment, round_up(static_cast<size_t>(bytes), kAlignment));
    if (!data) {
      ledger_.release(c, bytes);
      throw OutOfMemoryError(c, bytes, ledger_.budget(), ledger_.live_breakdown());
    }
    if (opts_.poison && dt == DType::F32) {
      float* f = static_cast<float*>(data);
      for (int64_t i = 0; i < shape.numel(); ++i) f[i] = NAN;
    }
  }
  Buffer b;
  b.t_ = Tensor(data, dt, shape);
  b.pool_ = this;
  b.category_ = c;
  b.bytes_ = bytes;
  return b;
}

Buffer Pool::zeros(Category c, DType dt, Shape shape) {
  Buffer b = allocate(c, dt, shape);
  if (b.t_.data) std::memset(b.t_.data, 0, static_cast<size_t>(b.bytes_));
  return b;
}

void Pool::release(Category c, void* data, int64_t bytes) {
  std::free(data);
  ledger_.release(c, bytes);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    t_ = o.t_;
    pool_ = o.pool_;
    category_ = o.category_;
    bytes_ = o.bytes_;
    o.pool_ = nullptr;
    o.t_ = Tensor();
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (pool_) pool_->release(category_, t_.data, bytes_);
  pool_ = nullptr;
  t_ = Tensor();
  bytes_ = 0;
}

}  // namespace sbp
