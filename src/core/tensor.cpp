#include "core/tensor.h"

#include <span>

#include "core/checked_math.h"

namespace sbp {

Shape::Shape(std::initializer_list<int64_t> d) {
  SBP_CHECK(d.size() >= 1 && d.size() <= static_cast<size_t>(kMaxDims), "shape rank must be 1..4");
  for (int64_t v : d) {
    SBP_CHECK(v >= 0, "negative dimension");
    dims[static_cast<size_t>(ndim++)] = v;
  }
}

int64_t Shape::numel() const {
  if (ndim == 0) return 0;
  // Dimensions come from files and configs: a product past int64 is an error, not a wrap.
  return checked_product(std::span<const int64_t>(dims.data(), static_cast<size_t>(ndim)),
                         "the element count of a tensor shape");
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  return s + ")";
}

int64_t Tensor::cols() const {
  if (shape.ndim <= 1) return 1;
  return checked_product(
      std::span<const int64_t>(shape.dims.data() + 1, static_cast<size_t>(shape.ndim - 1)),
      "the row length of a tensor shape");
}

size_t Tensor::nbytes() const {
  return static_cast<size_t>(
      checked_mul(numel(), static_cast<int64_t>(dtype_size(dtype)), "the byte size of a tensor"));
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  SBP_CHECK(
      shape.ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0],
      "row slice [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " + describe());
  Tensor t = *this;
  t.shape.dims[0] = end - begin;
  if (data) {
    t.data = static_cast<char*>(data) +
             static_cast<size_t>(begin) * static_cast<size_t>(cols()) * dtype_size(dtype);
  }
  return t;
}

Tensor Tensor::reshaped(Shape s) const {
  SBP_CHECK(s.numel() == numel(), "reshape " + describe() + " to " + s.str());
  Tensor t = *this;
  t.shape = s;
  return t;
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype)) + shape.str(); }

}  // namespace sbp
