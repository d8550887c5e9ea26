#pragma once
// The shape-only backend (DESIGN §4): the engine runs its exact code path against a Pool that
// does not materialise memory, so the ledger sees every allocation a real step makes, in
// seconds, for any model size. The Backend base checks every call as for any backend (so a plan
// rejects what a run would reject); the kernels here compute nothing and count FLOPs.
#include "backend/backend.h"
#include "backend/host_space.h"

namespace sbp {

class MetaBackend final : public Backend {
 public:
  // What the caller reads from a run. `all_work`: every chunk runs, so flops() counts the whole
  // step (bench, tests of the FLOP count). `ledger_only`: chunks that would repeat an earlier
  // chunk's allocations are skipped (Backend::skips_repeated_chunks); the ledger's peak and
  // breakdown are the same, the work is bounded by the model instead of by T.
  enum class Runs { all_work, ledger_only };
  explicit MetaBackend(Runs runs = Runs::all_work) : runs_(runs) {}

  std::string name() const override { return "meta"; }
  bool computes() const override { return false; }
  Kind kind() const override { return Kind::shape_only; }
  bool skips_repeated_chunks() const override { return runs_ == Runs::ledger_only; }

  // Memory that holds nothing: tensors have shapes and null data; transfers do nothing.
  void* allocate_bytes(size_t) override { return nullptr; }
  void release_bytes(void*, size_t) override {}
  bool holds_data() const override { return false; }
  bool host_addressable() const override { return false; }

 private:
  void upload_impl(void*, const void*, size_t) override {}
  void download_impl(void*, const void*, size_t) override {}
  void zero_impl(const Tensor&) override {}
  void poison_impl(const Tensor&) override {}
  // A host space that holds nothing either: offloaded bytes are recorded in its pool's ledger.
  MemorySpace& host_memory_impl() override { return host_; }
  void copy_async_impl(void*, const void*, size_t, bool, CopyTicket) override {}
  void wait_copy_impl(CopyTicket) override {}
  void gemm_impl(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                 float, float, const Tensor&) override;
  void fill_impl(const Tensor&, float) override {}
  void fill_normal_impl(const Tensor&, float, float, uint64_t, uint64_t, uint64_t) override {}
  void copy_impl(const Tensor&, const Tensor&) override {}
  void add_inplace_impl(const Tensor&, const Tensor&) override {}
  void scale_inplace_impl(const Tensor&, float) override {}
  double sum_squares_impl(const Tensor&) override { return 0.0; }
  void add_bias_impl(const Tensor&, const Tensor&) override {}
  void bias_backward_impl(const Tensor&, const Tensor&) override {}
  void rmsnorm_forward_impl(const Tensor&, const Tensor&, const Tensor&, float, float) override {}
  void rmsnorm_backward_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, float, float) override {}
  void rope_table_impl(const Tensor&, std::span<const float>, float, int64_t) override {}
  void rope_forward_impl(const Tensor&, const Tensor&, const Tensor&) override {}
  void rope_backward_impl(const Tensor&, const Tensor&, const Tensor&) override {}
  void swiglu_forward_impl(const Tensor&, const Tensor&, const Tensor&) override {}
  void swiglu_backward_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&) override {}
  void geglu_forward_impl(const Tensor&, const Tensor&, const Tensor&) override {}
  void geglu_backward_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&) override {}
  void softcap_forward_impl(const Tensor&, float) override {}
  void softcap_backward_impl(const Tensor&, const Tensor&, float) override {}
  void attention_forward_impl(const Tensor&, const Tensor&, const Tensor& q, const Tensor&,
                              const Tensor&, const Tensor&, int64_t q_offset,
                              const AttentionDims& dims) override;
  void attention_backward_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, const Tensor&, int64_t q_offset,
                               const AttentionDims& dims) override;
  void embedding_forward_impl(const Tensor&, const Tensor&, const Tensor&) override {}
  void embedding_backward_impl(const Tensor&, const Tensor&, const Tensor&, int64_t) override {}
  void logsoftmax_target_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {
  }
  void dlogits_inplace_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&) override {}
  void argmax_rows_impl(const Tensor&, const Tensor&) override {}
  void softmax_entropy_impl(const Tensor&, const Tensor&, const Tensor&) override {}
  void dlogits_entropy_inplace_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, const Tensor&) override {}
  void adamw_step_impl(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const AdamWStep&) override {}

  Runs runs_;
  ShapeOnlyHostSpace host_{*this};
};

}  // namespace sbp
