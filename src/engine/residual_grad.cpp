#include "engine/residual_grad.h"

#include <exception>

#include "core/error.h"

namespace sbp {

ResidualGrad::ResidualGrad(Backend& be, Pool& device, Pool* host, int64_t rows, int64_t d)
    : be_(be), device_(device), host_(host), rows_(rows), d_(d) {
  whole_ = (host ? *host : device).zeros(Category::grad_buffers, DType::F32, {rows, d});
}

ResidualGrad::~ResidualGrad() {
  // An exception left a copy in flight: the backend drains it when the buffers are released
  // while unwinding (Backend::wait_copy's contract); in a normal step finish() ran.
  if (leaving_.defined() && !std::uncaught_exceptions()) be_.wait_copy(leaving_copy_);
}

Tensor ResidualGrad::open(int64_t a, int64_t b) {
  SBP_CHECK(open_a_ < 0, "ResidualGrad: a range is already open");
  SBP_CHECK(0 <= a && a <= b && b <= rows_, "ResidualGrad: rows out of range");
  open_a_ = a;
  open_b_ = b;
  if (!host_) return whole_.view().slice_rows(a, b);
  if (leaving_.defined() && a < leaving_b_ && leaving_a_ < b) finish();  // rows still on the way
  open_buf_ = device_.allocate(Category::grad_buffers, DType::F32, {b - a, d_});
  be_.wait_copy(be_.prefetch_async(open_buf_.view(), whole_.view().slice_rows(a, b)));
  return open_buf_.view();
}

void ResidualGrad::close() {
  SBP_CHECK(open_a_ >= 0, "ResidualGrad: no range is open");
  if (host_) {
    finish();  // the previous chunk's copy back: at most one in flight
    leaving_copy_ = be_.offload_async(whole_.view().slice_rows(open_a_, open_b_), open_buf_.view());
    leaving_ = std::move(open_buf_);
    leaving_a_ = open_a_;
    leaving_b_ = open_b_;
  }
  open_a_ = open_b_ = -1;
}

void ResidualGrad::finish() {
  if (!leaving_.defined()) return;
  be_.wait_copy(leaving_copy_);
  leaving_.reset();
}

}  // namespace sbp
