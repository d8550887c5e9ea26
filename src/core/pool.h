#pragma once
// Pool and Buffer: every tensor the engine owns is a Buffer from a Pool, and every Pool
// allocation is recorded in a Ledger under a category. A Pool allocates in one memory space (a
// backend's, core/memory.h); one that holds no data (the shape-only planner's) records the same
// bytes but hands out null data pointers.
#include <cstdint>

#include "core/ledger.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace sbp {

class Buffer;

struct PoolOptions {
  bool poison = false;  // fill new float buffers with NaN to catch reads of unwritten memory
};

class Pool {
 public:
  Pool(Ledger& ledger, MemorySpace& memory, PoolOptions opts = {})
      : ledger_(ledger), memory_(memory), opts_(opts) {}
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Throws OutOfMemoryError past the ledger's budget or when the memory space cannot provide the
  // bytes (the error names the category and the bytes), InputError if the shape's size
  // overflows int64.
  Buffer allocate(Category c, DType dt, Shape shape);
  // Same, with the memory zeroed (for accumulators).
  Buffer zeros(Category c, DType dt, Shape shape);

  // The pool of the host space (Backend::host_memory) that this pool's step offloads to, with
  // its own ledger; null (the default): nothing is offloaded. Set by whoever owns the step's
  // memory; the host pool must outlive every use of this one.
  void set_host(Pool* host) { host_ = host; }
  Pool* host() const { return host_; }

  Ledger& ledger() { return ledger_; }
  MemorySpace& memory() { return memory_; }
  bool materialize() const { return memory_.holds_data(); }

 private:
  friend class Buffer;
  void* allocate_bytes_or_null(int64_t bytes);  // null when the space is out of memory
  void release(Category c, void* data, int64_t bytes);
  Ledger& ledger_;
  MemorySpace& memory_;
  PoolOptions opts_;
  Pool* host_ = nullptr;
};

// Move-only owner of one allocation.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = static_cast<Buffer&&>(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Tensor& view() const { return t_; }
  Tensor rows(int64_t begin, int64_t end) const { return t_.slice_rows(begin, end); }
  bool defined() const { return pool_ != nullptr; }
  Category category() const { return category_; }
  void reset();  // releases now

 private:
  friend class Pool;
  Tensor t_;
  Pool* pool_ = nullptr;
  Category category_ = Category::other;
  int64_t bytes_ = 0;
};

}  // namespace sbp
