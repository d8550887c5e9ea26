#include "core/pool.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace sbp {

Buffer Pool::allocate(Category c, DType dt, Shape shape) {
  const int64_t bytes = shape.numel() * static_cast<int64_t>(dtype_size(dt));
  ledger_.allocate(c, bytes);  // throws past the budget, before anything is allocated
  void* data = nullptr;
  if (memory_.holds_data() && bytes > 0) {
    data = memory_.allocate_bytes(static_cast<size_t>(bytes));
    if (!data) {
      ledger_.release(c, bytes);
      throw OutOfMemoryError(c, bytes, ledger_.budget(), ledger_.live_breakdown());
    }
  }
  Buffer b;
  b.t_ = Tensor(data, dt, shape, &memory_);
  b.pool_ = this;
  b.category_ = c;
  b.bytes_ = bytes;
  if (opts_.poison && dt != DType::I32) memory_.poison(b.t_);
  return b;
}

Buffer Pool::zeros(Category c, DType dt, Shape shape) {
  Buffer b = allocate(c, dt, shape);
  memory_.zero(b.t_);
  return b;
}

void Pool::release(Category c, void* data, int64_t bytes) {
  if (data) memory_.release_bytes(data, static_cast<size_t>(bytes));
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
