#include "backend/meta/meta_backend.h"

namespace sbp {

void MetaBackend::gemm_impl(const Tensor&, const Tensor& A, bool trans_a, const Tensor& B,
                            bool trans_b, float, float) {
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  flops_ += 2 * M * N * K;
}

namespace {
// Causal (query, key) pairs of one segment-free block: the planner's FLOP estimate.
int64_t causal_pairs(int64_t q_offset, int64_t n) { return n * q_offset + n * (n + 1) / 2; }
}  // namespace

void MetaBackend::attention_forward_impl(const Tensor&, const Tensor&, const Tensor& q,
                                         const Tensor&, const Tensor&, const Tensor&,
                                         int64_t q_offset, const AttentionDims& dims) {
  flops_ += 4 * dims.head_dim * dims.n_heads * causal_pairs(q_offset, q.rows());
}

void MetaBackend::attention_backward_impl(const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor& q, const Tensor&,
                                          const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, int64_t q_offset,
                                          const AttentionDims& dims) {
  flops_ += 10 * dims.head_dim * dims.n_heads * causal_pairs(q_offset, q.rows());
}

}  // namespace sbp
