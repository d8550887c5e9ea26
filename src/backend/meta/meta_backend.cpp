#include "backend/meta/meta_backend.h"

#include <algorithm>
#include <limits>

namespace sbp {

namespace {
// Adds a FLOP count computed in double, saturating at the int64 maximum: `plan` takes sequences
// (up to 2^28 tokens) whose attention FLOPs pass 9.2e18, and a wrapped counter is undefined
// behaviour (UBSan caught it at 10^7 tokens), not a number.
void add_flops(int64_t& total, double flops) {
  const double sum = static_cast<double>(total) + flops;
  total = sum >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(sum);
}
}  // namespace

void MetaBackend::gemm_impl(const Tensor&, const Tensor& A, bool trans_a, const Tensor& B,
                            bool trans_b, float, float, const Tensor&) {
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  add_flops(flops_, 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K));
}

namespace {
// Causal (query, key) pairs of queries [q_offset, q_offset + n) of one segment-free sequence:
// the planner's FLOP estimate. Row i sees i + 1 keys, or min(i + 1, window) with a sliding
// window: rows below the window see a triangle, the rest `window` keys each. A key offset
// (AttentionDims::k_offset) leaves out only keys no row sees: the same pairs.
int64_t causal_pairs(int64_t q_offset, int64_t n, int64_t window) {
  const int64_t a = q_offset, b = q_offset + n;
  const int64_t m = window > 0 ? std::clamp(window, a, b) : b;  // rows [a, m) see i + 1 keys
  return (m * (m + 1) - a * (a + 1)) / 2 + (b - m) * window;
}
}  // namespace

void MetaBackend::attention_forward_impl(const Tensor&, const Tensor&, const Tensor& q,
                                         const Tensor&, const Tensor&, const Tensor&,
                                         int64_t q_offset, const AttentionDims& dims) {
  add_flops(flops_, 4.0 * static_cast<double>(dims.head_dim * dims.n_heads) *
                        static_cast<double>(causal_pairs(q_offset, q.rows(), dims.window)));
}

void MetaBackend::attention_backward_impl(const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor& q, const Tensor&,
                                          const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, int64_t q_offset,
                                          const AttentionDims& dims) {
  add_flops(flops_, 10.0 * static_cast<double>(dims.head_dim * dims.n_heads) *
                        static_cast<double>(causal_pairs(q_offset, q.rows(), dims.window)));
}

}  // namespace sbp
