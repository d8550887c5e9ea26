#pragma once
// The CPU backend: fp32 compute on F32 or BF16 storage (storage.h), OpenBLAS sgemm, OpenMP-parallel
// kernels written here; GEMMs with a BF16 operand on bf16 dot products where the CPU has AVX-512
// BF16 (gemm_bf16_dot.h). Kernel families live in separate files (gemm.cpp and gemm_bf16.cpp,
// elementwise.cpp, norm.cpp, rope.cpp, swiglu.cpp, geglu.cpp, softcap.cpp, embedding.cpp,
// lm_head.cpp, entropy.cpp, adamw.cpp, attention.cpp).
#include "backend/backend.h"
#include "backend/cpu_threads.h"
#include "backend/host_block_cache.h"
#include "backend/host_space.h"

namespace sbp {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool computes() const override { return true; }
  Kind kind() const override { return Kind::cpu; }

  // Memory: 64-byte aligned host allocations, one per tensor; a large freed one is kept for
  // the next tensor of its size within the high-water mark (backend/host_block_cache.h).
  void* allocate_bytes(size_t bytes) override;
  void release_bytes(void* p, size_t bytes) override;
  void release_cached() override { blocks_.release_cached(); }
  bool holds_data() const override { return true; }
  bool host_addressable() const override { return true; }

 protected:
  void upload_impl(void* dst, const void* host, size_t bytes) override;
  void download_impl(void* host, const void* src, size_t bytes) override;
  void zero_impl(const Tensor& t) override;
  void poison_impl(const Tensor& t) override;
  // Host offload: plain host memory; a copy is one memcpy, done when it is queued (the CPU has
  // no compute to overlap it with), so there is nothing to wait for.
  MemorySpace& host_memory_impl() override { return host_; }
  void copy_async_impl(void* dst, const void* src, size_t bytes, bool to_host,
                       CopyTicket ticket) override;
  void wait_copy_impl(CopyTicket) override {}

 private:
  // Called by Backend's public methods with checked arguments (backend.h); every float tensor
  // may be F32 or BF16, in any combination (computed in fp32, see storage.h).
  // Ignores `scratch`: mixed products widen bounded panels on the heap (gemm_bf16.cpp).
  void gemm_impl(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                 float alpha, float beta, const Tensor& scratch) override;

  void fill_impl(const Tensor& x, float value) override;
  void fill_normal_impl(const Tensor& x, float mean, float std, uint64_t seed, uint64_t stream,
                        uint64_t offset) override;
  void copy_impl(const Tensor& dst, const Tensor& src) override;
  void add_inplace_impl(const Tensor& y, const Tensor& x) override;
  void scale_inplace_impl(const Tensor& x, float s) override;
  double sum_squares_impl(const Tensor& x) override;
  void add_bias_impl(const Tensor& y, const Tensor& b) override;
  void bias_backward_impl(const Tensor& db, const Tensor& dy) override;

  void rmsnorm_forward_impl(const Tensor& y, const Tensor& x, const Tensor& g, float eps,
                            float weight_offset) override;
  void rmsnorm_backward_impl(const Tensor& dx, const Tensor& dg, const Tensor& dy, const Tensor& x,
                             const Tensor& g, float eps, float weight_offset) override;

  void rope_table_impl(const Tensor& table, std::span<const float> inv_freq,
                       float attention_factor, int64_t first_position) override;
  void rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& table) override;
  void rope_backward_impl(const Tensor& dx, const Tensor& positions, const Tensor& table) override;

  void swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                            const Tensor& gate, const Tensor& up) override;
  void geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) override;
  void geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                           const Tensor& gate, const Tensor& up) override;
  void softcap_forward_impl(const Tensor& x, float cap) override;
  void softcap_backward_impl(const Tensor& dx, const Tensor& y, float cap) override;

  void attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q,
                              const Tensor& k, const Tensor& v, const Tensor& seg_start,
                              int64_t q_offset, const AttentionDims& dims) override;
  void attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                               const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& seg_start, int64_t q_offset,
                               const AttentionDims& dims) override;

  void embedding_forward_impl(const Tensor& x, const Tensor& ids, const Tensor& table) override;
  void embedding_backward_impl(const Tensor& dtable, const Tensor& dx, const Tensor& ids,
                               int64_t padding_row) override;

  void logsoftmax_target_impl(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                              const Tensor& targets) override;
  void dlogits_inplace_impl(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            const Tensor& dlogp) override;

  void argmax_rows_impl(const Tensor& out, const Tensor& logits) override;
  void softmax_entropy_impl(const Tensor& entropy, const Tensor& logits,
                            const Tensor& lse) override;
  void dlogits_entropy_inplace_impl(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                    const Tensor& dlogp, const Tensor& entropy,
                                    const Tensor& dentropy) override;

  void adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWStep& s) override;

 private:
  HostBlockCache blocks_;
  PlainHostSpace host_{*this};
};

}  // namespace sbp
