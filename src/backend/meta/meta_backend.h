#pragma once
// The shape-only backend (DESIGN §4): the engine runs its exact code path against a Pool that
// does not materialise memory, so the ledger sees every allocation a real step makes, in
// seconds, for any model size. Kernels check shapes and count FLOPs but compute nothing.
#include "backend/backend.h"

namespace sbp {

class MetaBackend final : public Backend {
 public:
  std::string name() const override { return "meta"; }
  bool computes() const override { return false; }

  void gemm(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
            float, float) override;
  void fill(const Tensor&, float) override {}
  void copy(const Tensor& dst, const Tensor& src) override;
  void add_inplace(const Tensor&, const Tensor&) override {}
  void scale_inplace(const Tensor&, float) override {}
  double sum_squares(const Tensor&) override { return 0.0; }
  void add_bias(const Tensor&, const Tensor&) override {}
  void bias_backward(const Tensor&, const Tensor&) override {}
  void rmsnorm_forward(const Tensor&, const Tensor&, const Tensor&, float) override {}
  void rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        float) override {}
  void rope_table(const Tensor&, std::span<const float>) override {}
  void rope_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void rope_backward(const Tensor&, const Tensor&, const Tensor&) override {}
  void swiglu_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void swiglu_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&) override {}
  void attention_forward(const Tensor&, const Tensor&, const Tensor& q, const Tensor&,
                         const Tensor&, const Tensor&, int64_t q_offset,
                         const AttentionDims& dims) override;
  void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, int64_t q_offset,
                          const AttentionDims& dims) override;
  void embedding_forward(const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_backward(const Tensor&, const Tensor&, const Tensor&) override {}
  void logsoftmax_target(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void dlogits_inplace(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void argmax_rows(const Tensor&, const Tensor&) override {}
  void softmax_entropy(const Tensor&, const Tensor&, const Tensor&) override {}
  void dlogits_entropy_inplace(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, const Tensor&) override {}
  void adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                  const AdamWStep&) override {}
};

}  // namespace sbp
