#include "backend/meta/meta_backend.h"

#include <algorithm>

namespace sbp {

void MetaBackend::gemm_impl(const Tensor&, const Tensor& A, bool trans_a, const Tensor& B,
                            bool trans_b, float, float, const Tensor&) {
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  flops_ += 2 * M * N * K;
}

namespace {
// Causal (query, key) pairs of queries [q_offset, q_offset + n) of one segment-free sequence:
// the planner's FLOP estimate. Row i sees i + 1 keys, or min(i + 1, window) with a sliding
// window: rows below the window see a triangle, the rest `window` keys each.
int64_t causal_pairs(int64_t q_offset, int64_t n, int64_t window) {
  const int64_t a = q_offset, b = q_offset + n;
  const int64_t m = window > 0 ? std::clamp(window, a, b) : b;  // rows [a, m) see i + 1 keys
  return (m * (m + 1) - a * (a + 1)) / 2 + (b - m) * window;
}
}  // namespace

void MetaBackend::attention_forward_impl(const Tensor&, const Tensor&, const Tensor& q,
                                         const Tensor&, const Tensor&, const Tensor&,
                                         int64_t q_offset, const AttentionDims& dims) {
  flops_ += 4 * dims.head_dim * dims.n_heads * causal_pairs(q_offset, q.rows(), dims.window);
}

void MetaBackend::attention_backward_impl(const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor& q, const Tensor&,
                                          const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, int64_t q_offset,
                                          const AttentionDims& dims) {
  flops_ += 10 * dims.head_dim * dims.n_heads * causal_pairs(q_offset, q.rows(), dims.window);
}

}  // namespace sbp
