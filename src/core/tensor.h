#pragma once
// Tensor: a non-owning view (pointer, shape, dtype) of a contiguous row-major array.
// Ownership lives in Buffer (core/pool.h). Views are cut only along the first dimension,
// so every view stays contiguous and kernels can treat a tensor as (rows, cols).
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace sbp {

class MemorySpace;  // core/memory.h

struct Shape {
  static constexpr int kMaxDims = 4;
  int ndim = 0;
  std::array<int64_t, kMaxDims> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);

  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;  // throws InputError if the product of dims does not fit int64
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "(4, 16)"
};

struct Tensor {
  void* data = nullptr;  // null for shape-only (meta) tensors
  DType dtype = DType::F32;
  Shape shape;
  // The space whose memory holds the bytes (a Backend's, core/memory.h); only its operations
  // and transfers touch them. nullptr: host memory of the caller's (a vector, a file buffer).
  MemorySpace* memory = nullptr;

  Tensor() = default;
  Tensor(void* d, DType dt, Shape s, MemorySpace* m = nullptr)
      : data(d), dtype(dt), shape(s), memory(m) {}

  bool defined() const { return shape.ndim > 0; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const;  // numel * dtype size; both checked against int64 overflow
  int64_t rows() const { return shape.ndim == 0 ? 0 : shape[0]; }
  int64_t cols() const;  // product of all dims but the first

  // Typed pointers to the bytes: for host tensors, and for a backend's kernels on its own
  // tensors (nothing else may dereference a backend's memory; the checking backend of the
  // tests makes sure).
  float* f32() const {
    SBP_CHECK(dtype == DType::F32, "tensor is " + std::string(dtype_name(dtype)) + ", not F32");
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    SBP_CHECK(dtype == DType::I32, "tensor is " + std::string(dtype_name(dtype)) + ", not I32");
    return static_cast<int32_t*>(data);
  }

  // Rows [begin, end) along dim 0, as a view.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same bytes, another shape with equal numel.
  Tensor reshaped(Shape s) const;
  std::string describe() const;  // "F32(4, 16)"
};

}  // namespace sbp
