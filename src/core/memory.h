#pragma once
// Where a tensor's bytes live (DESIGN §5 "Memory belongs to the backend"). Every Backend is a
// MemorySpace: a Pool allocates through one, every Tensor it hands out remembers it
// (Tensor::memory), and only that backend's own operations touch the bytes. Everything else
// moves data explicitly: whole tensors or row ranges with upload (host -> space) and download
// (space -> host), small per-row vectors (log-probs, lse, values) with the typed helpers below.
//
// A space may keep its memory out of reach between its own operations (a GPU's is; the checking
// backend of the tests makes a CPU's so with mprotect): every operation and transfer runs
// inside a MemoryAccess scope, which opens the memory on entry and closes it on exit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace sbp {

class MemorySpace {
 public:
  virtual ~MemorySpace() = default;

  // Bytes for one tensor, at least 64-byte aligned; nullptr from a space that holds no data
  // (the shape-only planner), or when the space is out of memory (the Pool reports it).
  virtual void* allocate_bytes(size_t bytes) = 0;
  virtual void release_bytes(void* p, size_t bytes) = 0;
  // False for the shape-only space: its tensors have shapes and no bytes, transfers do nothing
  // and downloads give zeros.
  virtual bool holds_data() const = 0;
  // True when the bytes are ordinary host memory that other code may address while no operation
  // runs (the CPU backend), so a communicator may reduce them in place; false for a GPU's memory
  // and for the checking backend's.
  virtual bool host_addressable() const = 0;
  // Null, or what is wrong with touching [p, p + bytes) now: a queued asynchronous copy
  // (Backend::offload_async / prefetch_async) still reads or writes it. Transfers and the Pool's
  // releases ask, so a use or a release before the copy was waited for is refused (ShapeError).
  virtual const char* in_flight(const void* p, size_t bytes) const {
    (void)p;
    (void)bytes;
    return nullptr;
  }
  // Lets every queued copy finish (an exception abandoned the step that queued them).
  virtual void drain_copies() {}
  // Gives freed memory that the space keeps for reuse back to the system, so that the next
  // step's peak resident memory is its own (backend/host_block_cache.h).
  virtual void release_cached() {}

  // ---- transfers (checked: `t` lives in this space; the host side holds t.nbytes() bytes of
  // t's dtype) ----
  void upload(const Tensor& dst, const void* host);
  void download(void* host, const Tensor& src);
  // Every byte of t to zero (accumulators); every element to NaN (fresh buffers in tests, so a
  // read of unwritten memory shows).
  void zero(const Tensor& t);
  void poison(const Tensor& t);

  // Opens the memory for this space's own code (nested scopes are counted).
  class Access {
   public:
    explicit Access(MemorySpace& m) : m_(m) {
      if (m_.open_depth_++ == 0) m_.open_memory();
    }
    ~Access() {
      if (--m_.open_depth_ == 0) m_.close_memory();
    }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    MemorySpace& m_;
  };

 protected:
  // Raw copies between host memory and this space's, inside an Access scope.
  virtual void upload_impl(void* dst, const void* host, size_t bytes) = 0;
  virtual void download_impl(void* host, const void* src, size_t bytes) = 0;
  virtual void zero_impl(const Tensor& t) = 0;
  virtual void poison_impl(const Tensor& t) = 0;
  // Called when the first Access scope opens / the last one closes; a space whose memory is
  // always reachable does nothing.
  virtual void open_memory() {}
  virtual void close_memory() {}

 private:
  void check_owner(const Tensor& t, const char* what) const;
  int open_depth_ = 0;
};

// ---- typed transfers of whole tensors (host conversion from and to F32/BF16/F16 storage) ----
// A tensor of no space (memory == nullptr) is host memory and is read or written directly.
std::vector<float> download_f32(const Tensor& t);
void upload_f32(const Tensor& t, std::span<const float> values);
std::vector<int32_t> download_i32(const Tensor& t);
void upload_i32(const Tensor& t, std::span<const int32_t> values);

// Calls fn(begin, end) for consecutive row ranges of t covering every row, each of at most
// `max_elements` elements (at least one row): bounded host buffers for transfers of large
// tensors (an embedding of 150k rows is moved a few MiB at a time).
template <class Fn>
void for_row_blocks(const Tensor& t, int64_t max_elements, Fn fn) {
  const int64_t cols = std::max<int64_t>(1, t.cols());
  const int64_t rows_per = std::max<int64_t>(1, max_elements / cols);
  for (int64_t r = 0; r < t.rows(); r += rows_per) fn(r, std::min(t.rows(), r + rows_per));
}

}  // namespace sbp
