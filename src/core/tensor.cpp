#include "core/tensor.h"

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
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
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
  int64_t c = 1;
  for (int i = 1; i < shape.ndim; ++i) c *= shape[i];
  return c;
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
