#include "core/pool.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "core/checked_math.h"

namespace sbp {

namespace {

// Bytes of a (dt, shape) buffer. Shapes derive from configs and files: the element count and
// the byte count are both checked, so an absurd shape is an error naming it, never a wrapped
// (small or negative) request.
int64_t buffer_bytes(Category c, DType dt, const Shape& shape) {
  const int64_t numel = shape.numel();  // throws naming the dims if they overflow
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(dt)), &bytes)) {
    throw_size_overflow(std::string("the bytes of a '") + category_name(c) + "' buffer of shape " +
                            shape.str() + " " + dtype_name(dt),
                        std::to_string(numel) + " * " + std::to_string(dtype_size(dt)));
  }
  return bytes;
}

}  // namespace

void* Pool::allocate_bytes_or_null(int64_t bytes) {
  // A space may report exhaustion either way: a null (the CPU's aligned_alloc) or
  // std::bad_alloc (an allocator that throws). Both become the Pool's OutOfMemoryError.
  try {
    return memory_.allocate_bytes(static_cast<size_t>(bytes));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

Buffer Pool::allocate(Category c, DType dt, Shape shape) {
  const int64_t bytes = buffer_bytes(c, dt, shape);
  ledger_.allocate(c, bytes);  // throws past the budget, before anything is allocated
  void* data = nullptr;
  if (memory_.holds_data() && bytes > 0) {
    data = allocate_bytes_or_null(bytes);
    if (!data) {
      ledger_.release(c, bytes);
      throw OutOfMemoryError(c, bytes, ledger_.budget(), ledger_.live_breakdown(),
                             OomCause::allocator, ledger_.space());
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
  if (const char* busy = memory_.in_flight(data, static_cast<size_t>(bytes))) {
    // Freed memory under a running copy would be reused while the copy still reads or writes
    // it. While an exception unwinds an abandoned step, its copies are let finish first; any
    // other such release is a bug, and a release runs in a destructor, which cannot throw.
    if (std::uncaught_exceptions() == 0) {
      std::fprintf(stderr, "internal error: a '%s' buffer released while %s\n",
                   category_name(c), busy);
      std::abort();
    }
    memory_.drain_copies();
  }
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
