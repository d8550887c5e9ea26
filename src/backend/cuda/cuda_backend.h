#pragma once
// The CUDA backend: BF16 or F32 storage with fp32 accumulation, on one GPU.
//  - memory: a DeviceArena of cudaMalloc'd segments (arena.h), one per backend;
//  - GEMMs through cuBLASLt (gemm.cu), fp32 compute, a preallocated workspace;
//  - attention: our own kernels, on the tensor cores (attention_tc.cu) or fp32 CUDA cores
//    (attention_simt.cu), dispatched by attention.cu;
//  - the rest: small kernels, one file per family (elementwise.cu, norm.cu, rope_swiglu.cu,
//    embedding.cu, lm_head.cu, adamw.cu), whose arithmetic lives in kernel_math.h.
// Every operation runs on the backend's own stream. Operations that return a host value
// (sum_squares) or read index contents (checks.cu) synchronise it; transfers do too.
//
// Only the streambp_cuda library includes this header (it needs the CUDA headers); the rest of
// the program uses cuda_factory.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/arena.h"
#include "backend/cuda/check_state.h"
#include "backend/cuda/pinned_host_space.h"
#include "backend/cuda/upload_staging.h"

namespace sbp {

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  bool computes() const override { return true; }
  Kind kind() const override { return Kind::cuda; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const cuda::DeviceArena& arena() const { return *arena_; }
  cuda::DeviceArena& arena() { return *arena_; }

  void* allocate_bytes(size_t bytes) override;
  void release_bytes(void* p, size_t bytes) override;
  bool holds_data() const override { return true; }
  bool host_addressable() const override { return false; }

  // ---- for the kernels' host code (launch helpers) ----
  // Device scratch of at least `bytes`, kept and grown on demand (from the arena, so it shows
  // in the device peak; not in the ledger, like any framework's workspace). `slot` tells apart
  // scratch that one operation needs at the same time. Valid until the next call with the same
  // slot.
  enum Slot { kScratchA, kScratchB, kScratchC, kScratchRows, kScratchIndex, kSlots };
  void* scratch(Slot slot, size_t bytes);
  // Index contents checks (checks.cu), on the device: a bad entry is reported by the next
  // download or synchronisation (flush_checks), as the CPU backend's message for the first bad
  // entry; kernels that index with a checked tensor skip their work once a check has failed.
  // Every entry of t (I32) in [lo, hi); else ShapeError(message(index, value)).
  void check_index_range(const Tensor& t, int64_t lo, int64_t hi,
                         std::function<std::string(int64_t, int64_t)> message);
  // seg_start rows [q_offset, q_offset + n): 0 <= s <= r, non-decreasing. The visible
  // (query, key) pairs times flops_per_pair are added to flops() at the same read.
  void check_segments(const char* op, const Tensor& seg_start, int64_t q_offset, int64_t n,
                      int64_t window, int64_t flops_per_pair);
  // Device word that is non-zero once a check has failed (for the kernels' early return).
  const unsigned* check_failed() const { return &checks_->failed; }
  // host[0, bytes) to device memory at dst, queued on the stream through pinned staging: no
  // host wait, and the caller may reuse host at once (upload_staging.h).
  void upload_async(void* dst, const void* host, size_t bytes);

  // ---- another way, when the device refuses the first ----
  // Times a call ran a second way because the device or cuBLASLt refused the first (gemm.cu:
  // another cuBLASLt algorithm; attention.cu: the fp32 kernels). `bench` reports it per run
  // (cuda_fallbacks, cuda_factory.h).
  int64_t fallbacks() const { return fallbacks_; }
  // Counts one and prints "gpu fallback: <what><detail>" on stderr the first time `what` is seen
  // (a refusal repeats every layer; `detail` varies with the call, e.g. its row count).
  void note_fallback(const std::string& what, const std::string& detail = "");

 protected:
  void synchronize_impl() override;  // the backend's stream
  // A copy into pinned staging on stream_, handed to dst at the next wait (complete_reads).
  void download_at_next_wait_impl(const Tensor& src,
                                  std::shared_ptr<std::vector<float>> dst) override;
  void finish_reads_impl() override;
  void upload_impl(void* dst, const void* host, size_t bytes) override;
  void download_impl(void* host, const void* src, size_t bytes) override;
  void zero_impl(const Tensor& t) override;
  void poison_impl(const Tensor& t) override;
  // Every operation and transfer runs in an Access scope (core/memory.h): the first one makes
  // this backend's GPU the current device, so two backends on two GPUs in one process (policy
  // and reference, say) each launch on their own.
  void open_memory() override;
  // Host offload (host_offload.cu): pinned host blocks; copies on copy_stream_, ordered with
  // stream_ by events.
  MemorySpace& host_memory_impl() override;
  void copy_async_impl(void* dst, const void* src, size_t bytes, bool to_host,
                       CopyTicket ticket) override;
  void wait_copy_impl(CopyTicket ticket) override;

 private:
  int open_check(std::function<std::string(int64_t, int64_t)> message);  // a record's slot
  // Queues the copy of the check records to pinned_ (before the caller's synchronisation)...
  void queue_check_readback();
  // ...and after it: adds the device-counted FLOPs, clears the records, throws the first error.
  void flush_checks();

  // Runs on bf16 tensor cores unless A and B are both F32 (gemm.cu, gemm_plan.h), with the
  // conversions in `scratch` (backend/gemm_scratch.h).
  void gemm_impl(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                 float alpha, float beta, const Tensor& scratch) override;
  void gemm_lt(void* C, cudaDataType tc, int64_t ldc, const void* A, cudaDataType tab, int64_t lda,
               bool trans_a, const void* B, int64_t ldb, bool trans_b, int64_t M, int64_t N,
               int64_t K, float alpha, float beta);

  void fill_impl(const Tensor& x, float value) override;
  void fill_normal_impl(const Tensor& x, float mean, float std, uint64_t seed, uint64_t stream,
                        uint64_t offset) override;
  void copy_impl(const Tensor& dst, const Tensor& src) override;
  void add_inplace_impl(const Tensor& y, const Tensor& x) override;
  void scale_inplace_impl(const Tensor& x, float s) override;
  double sum_squares_impl(const Tensor& x) override;
  void sum_squares_each_impl(std::span<const Tensor> xs, std::span<double> out) override;
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

  // Whether attention runs on the tensor cores (attention_tc.cu) for head_dim h: the kernels
  // can, and STREAMBP_CUDA_ATTENTION (read once, at construction) is not "simt".
  bool use_tensor_core_attention(int h) const;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::UploadStaging> staging_;  // upload_async's
  int64_t fallbacks_ = 0;
  std::set<std::string> fallbacks_printed_;
  size_t smem_optin_ = 48 * 1024;  // shared memory per block a kernel may opt in to
  bool simt_attention_ = false;    // STREAMBP_CUDA_ATTENTION=simt
  cublasLtHandle_t lt_ = nullptr;
  std::unique_ptr<cuda::DeviceArena> arena_;
  void* workspace_ = nullptr;  // cuBLASLt's, kWorkspaceBytes
  struct ScratchBuf {
    void* p = nullptr;
    size_t bytes = 0;
  };
  ScratchBuf scratch_[kSlots];
  // The check records (device) and their pinned host copy (checks.cu); the message makers of
  // the records in use, by slot.
  cuda::CheckState* checks_ = nullptr;
  void* pinned_ = nullptr;
  std::vector<std::function<std::string(int64_t, int64_t)>> checks_pending_;
  // Reads queued by download_at_next_wait: the pinned staging each copy lands in and the host
  // values it goes to once the host has waited for stream_ (complete_reads, after the wait of
  // every download and synchronisation).
  struct PendingRead {
    void* staging = nullptr;
    std::shared_ptr<std::vector<float>> dst;
  };
  std::vector<PendingRead> pending_reads_;
  void complete_reads();
  // cuBLASLt's algorithm per problem (types, transposes, sizes, leading dims, alignment): the
  // first of the heuristic's answers that cublasLtMatmul took at the problem's first call
  // (gemm.cu). Asking costs tens of microseconds, and the engine repeats the same few shapes.
  using GemmKey = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int, bool>;
  std::map<GemmKey, cublasLtMatmulAlgo_t> algos_;
  // Host offload (host_offload.cu).
  std::unique_ptr<PinnedHostSpace> host_;
  cudaStream_t copy_stream_ = nullptr;                          // created by the first copy
  std::deque<std::pair<CopyTicket, cudaEvent_t>> copy_events_;  // queued copies' done events
  std::vector<cudaEvent_t> free_events_;                        // events to record again
  cudaEvent_t take_event();
  void destroy_copy_resources();
};

}  // namespace sbp
