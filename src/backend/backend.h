#pragma once
// Backend: the kernels the model needs, behind one interface, so that the shape-only
// planner (meta) and a GPU backend can run the very same model and engine code.
//
// Conventions (DESIGN §6):
//  - every tensor is a contiguous row-major view; "(n, d)" comments give shapes;
//  - backward kernels ACCUMULATE into their gradient outputs (+=); zeroing is fill();
//  - reductions have a fixed order: same inputs + thread count => same bits.
//
// Checks live in one place. Every public operation is a non-virtual method that checks its
// arguments against the contract written above it (backend.cpp) and only then calls the
// backend's protected `<op>_impl`. So the shape-only planner, the CPU and any later backend
// reject exactly the same misuse, with the same message ("<op>: <argument> <dtype(shape)> ..."),
// thrown as ShapeError. Implementations may assume a checked call.
//
// What the contract covers: the shapes and numel relations of every tensor of a call, their
// dtypes and the scalar arguments, i.e. everything that is a property of the call itself.
// Dtypes:
//  - index tensors (token ids, targets, positions, segment starts, argmax output) are I32;
//  - "float" tensors (activations, weights, weight gradients, logits) are F32 or BF16, in any
//    combination within a call (mixed precision: e.g. an F32 gradient times a BF16 weight into
//    an F32 gradient). BF16 is storage only: kernels compute and accumulate in fp32 (or fp64),
//    read BF16 exactly, and round a BF16 output to nearest even once per element and call (an
//    accumulating output, += or beta = 1, is read, added to in fp32 and rounded once). The
//    planner runs bf16 models through the meta backend; the CPU backend computes them. A
//    backend may compute in fewer dtypes than the contract allows: that is a capability of one
//    backend, not misuse of the interface;
//  - per-row statistics and accumulators are F32: attention lse, logsoftmax lse and logp,
//    dlogp, entropy, dentropy, AdamW m and v, the rope table.
// What it does not cover: the CONTENTS of index tensors (token ids < V, positions < P,
// segment starts monotone and <= their row). Only a backend that holds the data can read them,
// and they guard that backend's own memory accesses, so each computing backend checks them in
// its kernels, before any parallel loop (the CPU backend does); the meta backend cannot.
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include <initializer_list>
#include <memory>
#include <vector>

#include "backend/op_profile.h"
#include "core/ledger.h"
#include "core/memory.h"
#include "core/pool.h"
#include "core/tensor.h"

namespace sbp {

struct AttentionDims {
  int64_t n_heads = 0;     // H query heads
  int64_t n_kv_heads = 0;  // G key/value heads; query head j reads kv head j / (H / G)
  int64_t head_dim = 0;    // h
  float scale = 0.0f;      // softmax scale, usually 1/sqrt(h)
  int64_t window = 0;      // sliding window: a row sees its last `window` keys; 0 = no window
  // Global row of k's first row (attention_forward): a sliding layer in stream mode holds only
  // the keys of its window (engine/window_stream.h). Not a property of the layer but of the
  // call; it lives here so that the many attention call sites and every backend's signature
  // stay as they are.
  int64_t k_offset = 0;
};

struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for bias correction
};

// A Backend is also the memory space its tensors live in (core/memory.h): a Pool allocates
// through it, and every operation checks that each tensor of the call lives in this backend's
// memory and runs inside a MemorySpace::Access scope.
class Backend : public MemorySpace {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // False for the shape-only backend: kernels do nothing, tensors have no data.
  virtual bool computes() const = 0;
  // Which implementation this is, for a layer above that keeps kernels of its own per kind
  // (objective_kernels/: the objectives' formulas, no part of this contract).
  enum class Kind { cpu, cuda, shape_only };
  virtual Kind kind() const = 0;
  // True for a shape-only backend that only the ledger is read from (the planner's): the engine
  // may then skip the chunks of a loop that would repeat an earlier chunk's allocations exactly
  // (engine.cpp, ChunkRange), so that planning work does not grow with T / chunk. FLOP counts
  // then cover only the chunks run.
  virtual bool skips_repeated_chunks() const { return false; }

  // ---- dense ----
  // C (M, N) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T; A, B, C viewed as (rows, cols).
  // Checks: C, A, B float; op(A) is (M, K), op(B) (K, N), C (M, N); alpha, beta finite.
  // A mixed-dtype call takes conversion scratch (gemm_scratch.h) from the lent pool for its
  // duration, so the ledger records it (layer_workspace).
  void gemm(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
            float alpha, float beta);

  // Lends `pool` to the backend for the conversion scratch of its GEMMs while the loan lives
  // (loans nest; the innermost wins). An engine lends its own pool for each of its passes, so
  // the step's ledger holds the scratch and a plan counts it; without a loan the scratch comes
  // from the backend's own unbudgeted pool (calls outside an engine: merging adapters, tests).
  class ScratchLoan {
   public:
    ScratchLoan(Backend& be, Pool& pool) : be_(be), prev_(be.scratch_pool_) {
      be.scratch_pool_ = &pool;
    }
    ~ScratchLoan() { be_.scratch_pool_ = prev_; }
    ScratchLoan(const ScratchLoan&) = delete;
    ScratchLoan& operator=(const ScratchLoan&) = delete;

   private:
    Backend& be_;
    Pool* prev_;
  };

  // ---- elementwise and reductions ----
  // Checks: x float.
  void fill(const Tensor& x, float value);
  // x[i] = mean + std * N(offset + i), N(j) the standard normal number j of stream (seed,
  // stream) (core/counter_normal.h: a formula of the counter, so every backend stores the same
  // values, and a tensor filled in pieces at their offsets equals it filled whole), computed in
  // fp64, rounded once to fp32 (and once more for a BF16 x). Random weights drawn where they
  // live (model/device_init.h). Checks: x float; mean, std finite, std >= 0.
  void fill_normal(const Tensor& x, float mean, float std, uint64_t seed, uint64_t stream,
                   uint64_t offset = 0);
  // dst = src (same numel); converts between F32 and BF16 where the dtypes differ.
  // Checks: equal numel; equal dtypes (any, I32 included) or one F32 and the other BF16.
  void copy(const Tensor& dst, const Tensor& src);
  // y += x. Checks: y, x float with equal numel.
  void add_inplace(const Tensor& y, const Tensor& x);
  // x *= s. Checks: x float.
  void scale_inplace(const Tensor& x, float s);
  // sum of x^2 in fp64, fixed order. Checks: x float.
  double sum_squares(const Tensor& x);
  // sum over xs in order of sum_squares(x), each in fp64 as above: the same bits as the loop,
  // with one wait for the device instead of one per tensor (a gradient norm). Checks: as above.
  double sum_squares(std::span<const Tensor> xs);
  // out[i] = sum_squares(xs[i]) (out: xs.size()), with one wait for the device for all of them
  // (two models' gradient norms at once). Checks: as above.
  void sum_squares_each(std::span<const Tensor> xs, std::span<double> out);
  // y (n, m) += b (m). Checks: y, b float; b.numel() == y.cols().
  void add_bias(const Tensor& y, const Tensor& b);
  // db (m) += sum_rows dy (n, m). Checks: db, dy float; db.numel() == dy.cols().
  void bias_backward(const Tensor& db, const Tensor& dy);

  // ---- RMSNorm over the last dimension: x viewed as (rows, d), g (d) ----
  // y = x / sqrt(mean(x^2) + eps) * (weight_offset + g), in fp32.
  // weight_offset is 0 for Llama/Qwen; Gemma stores its norm weights centred on zero and
  // scales by (1 + g), computed in fp32 as transformers does (offset 1).
  // Checks: y, x, g float; d = g.numel() > 0 divides x.numel(); y.numel() == x.numel();
  // eps finite and >= 0; weight_offset finite.
  void rmsnorm_forward(const Tensor& y, const Tensor& x, const Tensor& g, float eps,
                       float weight_offset = 0.0f);
  // dx += ..., dg += ... (recomputes the row statistics from x); dg does not depend on the
  // offset, dx sees the weight (weight_offset + g).
  // Checks: all float; d = g.numel() > 0 divides x.numel(); dx, dy have x's numel;
  // dg.numel() == d; eps finite and >= 0; weight_offset finite.
  void rmsnorm_backward(const Tensor& dx, const Tensor& dg, const Tensor& dy, const Tensor& x,
                        const Tensor& g, float eps, float weight_offset = 0.0f);

  // ---- rotary embedding (Hugging Face "rotate_half" layout) ----
  // table (P, h): row r holds s cos(p * inv_freq) in [0, h/2) and s sin(p * inv_freq) in
  // [h/2, h), p = first_position + r, s = attention_factor (yarn's scaling of cos and sin,
  // applied in fp32 after them as transformers does; 1 leaves them as they are).
  // first_position: a table built in row ranges, each with its own frequencies (dynamic rope).
  // Checks: table (P, h) F32, h even and > 0; inv_freq.size() == h/2, entries finite;
  // attention_factor finite and > 0; first_position >= 0 and first_position + P < 2^31.
  void rope_table(const Tensor& table, std::span<const float> inv_freq,
                  float attention_factor = 1.0f, int64_t first_position = 0);
  // x (n, nh * h), in place; positions (n) I32 index rows of the table.
  // Checks: x float; table (P, h) F32, h even and > 0; x.cols() % h == 0;
  // positions I32 with numel n = x.rows(). (Positions < P: the computing backend.)
  void rope_forward(const Tensor& x, const Tensor& positions, const Tensor& table);
  // Inverse rotation, in place: turns d(rotated) into d(unrotated). Checks: as rope_forward.
  void rope_backward(const Tensor& dx, const Tensor& positions, const Tensor& table);

  // ---- SwiGLU: out = silu(gate) * up, all (n, F) ----
  // Checks: all float with equal numel.
  void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
  // dgate +=, dup +=. Checks: all float with equal numel.
  void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                       const Tensor& gate, const Tensor& up);

  // ---- GeGLU (Gemma): out = gelu_tanh(gate) * up, all (n, F) ----
  // gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), PyTorch's
  // gelu(approximate="tanh") = transformers' "gelu_pytorch_tanh".
  // Checks: all float with equal numel.
  void geglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
  // dgate +=, dup +=. Checks: all float with equal numel.
  void geglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                      const Tensor& gate, const Tensor& up);

  // ---- logit soft-capping (Gemma's final_logit_softcapping): y = cap * tanh(x / cap) ----
  // In place over x (any shape). Checks: x float; cap finite and > 0.
  void softcap_forward(const Tensor& x, float cap);
  // dx *= 1 - (y / cap)^2, in place: turns dL/dy into dL/dx, from the capped values y
  // (the forward's output). Checks: dx, y float with equal numel; cap finite and > 0.
  void softcap_backward(const Tensor& dx, const Tensor& y, float cap);

  // ---- attention: causal within segments, GQA, query offset; never a T x T buffer ----
  // q (n, H*h): queries of global rows [q_offset, q_offset + n).
  // k, v (Tk, G*h): keys/values of global rows [k0, k0 + Tk), k0 = dims.k_offset (0: the
  // whole prefix), k0 + Tk >= q_offset + n.
  // seg_start (>= q_offset + n) I32, indexed by global row: the first row of that row's
  // segment. Query row i attends to keys j with seg_start[i] <= j <= i.
  // Key offset k0 > 0: only with a window, and k0 <= q_offset - w + 1, so that no query row
  // sees a key below k0 (its first key max(seg_start[i], i - w + 1) >= i - w + 1 >= k0). The
  // result is that of the same call with all keys [0, k0 + Tk) and k_offset 0 (with the CPU
  // backend, the same bits: its key tiles stay at global multiples), restricted to k's rows.
  // Sliding window (dims.window = w > 0, Hugging Face's sliding-window layers: Gemma 2/3,
  // Mistral, Qwen2 use_sliding_window): row i attends to keys j with
  // max(seg_start[i], i - w + 1) <= j <= i, i.e. itself and at most w - 1 keys before it. w = 0
  // is no window; w >= i + 1 for every row is no window either (the same keys, and with the CPU
  // backend the same bits). Keys outside every row's window are not computed with, not merely
  // masked: the work, and the FLOPs counted, go as n * w, not n * Tk.
  // out (n, H*h); lse (n, H) F32: log-sum-exp of the scaled scores per row and head.
  // Checks: H, G, h > 0; H % G == 0; scale finite; window >= 0; q, k, v, out float;
  // q.cols() == H*h; k (Tk, G*h) and v of k's shape; out of q's shape; lse (n, H) F32;
  // 0 <= q_offset and q_offset + n <= k0 + Tk; k0 >= 0, and k0 = 0 or (window > 0 and
  // k0 <= q_offset - window + 1); k0 + Tk < 2^31 (segment starts are I32); seg_start I32
  // with at least q_offset + n entries. (Segment starts monotone and <= their row: the
  // computing backend.)
  void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                         const AttentionDims& dims);
  // dq (n, H*h) +=, dk, dv (Tk, G*h) += (rows of global keys [k0, k0 + Tk), as k);
  // recomputes the probabilities from q, k, lse.
  // D_i = sum_j P_ij dP_ij may be taken as rowsum(dout * out) when out is the forward's F32
  // output; a BF16 out is rounded, and D from it would break sum_j dS_ij = 0 by 2^-9, so with
  // a BF16 out a backend computes D from P and dP (the result is that of the unrounded out).
  // Checks: as attention_forward, and dq, dout of q's shape, dk, dv of k's shape, all float.
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& seg_start, int64_t q_offset,
                          const AttentionDims& dims);

  // ---- embedding ----
  // x (n, d) = rows ids (n) of table (V, d).
  // Checks: x, table float; table.cols() == x.cols(); ids I32 with numel n = x.rows().
  // (ids < V: the computing backend.)
  void embedding_forward(const Tensor& x, const Tensor& ids, const Tensor& table);
  // dtable (V, d) += scatter of dx (n, d) by ids (n); fixed order. Positions whose id is
  // padding_row add nothing (torch's nn.Embedding padding_idx; -1: every position adds).
  // Checks: as embedding_forward, with dtable for table and dx for x; padding_row in [-1, V).
  void embedding_backward(const Tensor& dtable, const Tensor& dx, const Tensor& ids,
                          int64_t padding_row = -1);

  // ---- LM head ----
  // logits (n, V); targets (n) I32, < 0 = no target. lse (n) = logsumexp(logits row);
  // logp (n) = logits[target] - lse (0 where there is no target).
  // Checks: logits float with V > 0 columns; lse, logp F32 and targets I32, all with numel n.
  // (Targets < V: the computing backend.)
  void logsoftmax_target(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                         const Tensor& targets);
  // Overwrites logits with dL/dlogits = dlogp * (onehot(target) - softmax(logits)) per row;
  // rows without a target become zero.
  // Checks: logits float with V > 0 columns; lse, dlogp F32 and targets I32, numel n.
  void dlogits_inplace(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                       const Tensor& dlogp);

  // out (n) I32: index of the largest logit of each row (the first one on ties).
  // Checks: logits float with V > 0 columns; out I32 with numel n.
  void argmax_rows(const Tensor& out, const Tensor& logits);

  // entropy (n) = -sum_j p_j log p_j of each row's softmax p = softmax(logits row), given the
  // row's lse (n) from logsoftmax_target. Summed as sum_j p_j (lse - logit_j): terms >= 0, so
  // no cancellation. For entropy bonuses and entropy logging (GRPO, PPO).
  // Checks: logits float with V > 0 columns; entropy, lse F32 with numel n.
  void softmax_entropy(const Tensor& entropy, const Tensor& logits, const Tensor& lse);
  // dlogits_inplace plus the entropy's gradient: overwrites logits with
  //   dL/dlogit_j = dlogp (onehot_j - p_j) + dentropy * p_j (lse - logit_j - H)
  // (dH/dlogit_j = -p_j (log p_j + H)); entropy (n) = H from softmax_entropy, dentropy (n).
  // Rows without a target keep only the entropy term.
  // Checks: logits float with V > 0 columns; lse, dlogp, entropy, dentropy F32 and targets
  // I32, all with numel n.
  void dlogits_entropy_inplace(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                               const Tensor& dlogp, const Tensor& entropy, const Tensor& dentropy);

  // ---- operations a higher layer owns (objective_kernels/objective_kernels.h) ----
  // Runs `impl`, that layer's kernel for this backend's kind, as this backend runs its own ops:
  // every tensor of `tensors` must live in this backend's memory and not be in flight (the
  // message names `op`), impl runs inside the memory's Access scope, and with a profile
  // attached it is timed and recorded under `family` with `bytes` moved. So a plan's ledger,
  // the checking backend's protections and `bench`'s op profile see it as any other op. The
  // caller has checked the call's arguments (backend_checks.h's contract helpers).
  void run_extension(const char* op, OpFamily family, std::span<const Tensor* const> tensors,
                     int64_t bytes, const std::function<void()>& impl);

  // ---- optimizer ----
  // Decoupled weight decay, bias-corrected moments, fp32 states m, v.
  // Checks: param, grad float; m, v F32; all of param's numel; lr finite and >= 0; beta1,
  // beta2 in [0, 1); eps finite and > 0; weight_decay finite and >= 0; step >= 1.
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const AdamWStep& s);

  // FLOPs performed by gemm and attention since the last reset (counted by the kernels,
  // recomputation included), for the achieved-GFLOP/s figure of `streambp bench`.
  // A backend that counts data-dependent FLOPs on its device (CUDA: attention's visible pairs)
  // adds them at its next synchronisation: read flops() after synchronize().
  int64_t flops() const { return flops_; }
  void reset_flops() { flops_ = 0; }

  // Per-family time, FLOPs and bytes of every op from now on go to `p` (owned by the caller;
  // nullptr: off). See op_profile.h. An asynchronous backend (CUDA) is synchronised before and
  // after each profiled op, so the time is the op's own, not its launch's; a profiled step is
  // then slower than an unprofiled one by the lost overlap.
  void set_profile(OpProfile* p) { profile_ = p; }

  // Waits until every operation queued so far has finished, and reports what the backend checks
  // on its device without waiting (the CUDA backend's index contents checks: a bad token id
  // throws here, or at the next download, not in the op that was given it). The step's end.
  void synchronize() { synchronize_impl(); }

  // ---- reads that ride on the next wait (engine/deferred_reads.h) ----
  // Queues a copy of src (F32, this backend's) for the host, after every operation queued so
  // far, without waiting for the device: the returned vector (numel values) holds them once
  // this backend next waits for its device (a download, sum_squares, synchronize() or
  // finish_reads()), and is unspecified until then. The backend shares the vector until it has
  // written it, so the caller may drop it at any time; src may be released or written as soon
  // as this returns. So a value the host needs only at a step's end rides on the wait the step
  // makes anyway (the gradient norm) instead of a wait of its own.
  // Checks: src F32, of this backend.
  std::shared_ptr<std::vector<float>> download_at_next_wait(const Tensor& src);
  // Completes every download_at_next_wait(): waits for the device only if one is still
  // pending, i.e. no wait came after it.
  void finish_reads() { finish_reads_impl(); }
  OpProfile* profile() const { return profile_; }

  // ---- host offload (DESIGN §4 "Offload"): a second memory space beside the backend's own ----
  // Host memory (pinned on a GPU, so that copies run asynchronously), where a step parks what
  // grows with T while it is not needed (layer-input checkpoints). Its tensors are refused by
  // every op above; they move only by the two copies below. Each backend keeps a host space
  // that is as strict as its own memory: the checking backend's is out of reach outside the
  // copies too, the shape-only backend's holds no data.
  MemorySpace& host_memory() { return host_memory_impl(); }

  // A queued copy; wait_copy() orders later operations after it.
  using CopyTicket = int64_t;
  // Queues dst (host_memory()'s) = src (this backend's), after every operation queued so far,
  // on a copy queue of the backend's own so that it overlaps the operations queued after it.
  // Until wait_copy(ticket) src is in flight: an op, transfer or release that touches it is an
  // ShapeError (so is one that touches dst), and no op may be queued on it.
  // Checks: dst in host_memory(), src in this backend; equal dtypes and numel.
  CopyTicket offload_async(const Tensor& dst, const Tensor& src);
  // Queues dst (this backend's) = src (host_memory()'s), ordered as offload_async (and after
  // every copy queued before it: the copy queue is first in, first out). dst is in flight until
  // wait_copy(ticket). Checks: as offload_async, the spaces swapped.
  CopyTicket prefetch_async(const Tensor& dst, const Tensor& src);
  // Every operation queued after this call runs after copy `ticket` and every copy queued
  // before it completed; their tensors are no longer in flight. The host does not wait (a GPU's
  // compute stream waits for the copy stream's event). Checks: a ticket this backend issued.
  void wait_copy(CopyTicket ticket);
  // Copies queued and not yet waited for (tests: none at a step's end).
  int64_t copies_in_flight() const { return static_cast<int64_t>(in_flight_.size()); }
  // Bytes moved by offload_async / prefetch_async since the backend was made (bench reports it).
  int64_t offloaded_bytes() const { return offloaded_bytes_; }
  int64_t prefetched_bytes() const { return prefetched_bytes_; }

 protected:
  // Waits until every operation queued so far has finished. Nothing to do for a backend whose
  // operations complete before they return (CPU); the profiler calls it around each op.
  virtual void synchronize_impl() {}
  // The default copies at once (a backend whose operations complete before they return, or
  // the shape-only one), and so has nothing to finish.
  virtual void download_at_next_wait_impl(const Tensor& src,
                                          std::shared_ptr<std::vector<float>> dst);
  virtual void finish_reads_impl() {}

  // The host space (see host_memory()).
  virtual MemorySpace& host_memory_impl() = 0;
  // Queue the copy of `bytes` bytes; `to_host` says which way. `ticket` numbers the copies of
  // this backend in order (1, 2, ...). A backend may copy at once (CPU), on a copy stream (CUDA),
  // or not before wait_copy_impl (the checking backend: so a missing wait shows as stale data as
  // well as by the in-flight check).
  virtual void copy_async_impl(void* dst, const void* src, size_t bytes, bool to_host,
                               CopyTicket ticket) = 0;
  // Make later operations wait for copy `ticket` and every one before it.
  virtual void wait_copy_impl(CopyTicket ticket) = 0;
  // Whether [p, p + bytes) of this backend's memory overlaps a copy in flight, and which
  // (MemorySpace::in_flight; releases and transfers ask it).
  const char* in_flight(const void* p, size_t bytes) const override;
  void drain_copies() override;

  // The implementations, called with checked arguments only (see the public methods above).
  // gemm's `scratch`: gemm_scratch(...).total() bytes as a BF16 vector of half as many elements
  // (undefined when the rule asks for none), the backend's to use or ignore.
  virtual void gemm_impl(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B,
                         bool trans_b, float alpha, float beta, const Tensor& scratch) = 0;
  virtual void fill_impl(const Tensor& x, float value) = 0;
  virtual void fill_normal_impl(const Tensor& x, float mean, float std, uint64_t seed,
                                uint64_t stream, uint64_t offset) = 0;
  virtual void copy_impl(const Tensor& dst, const Tensor& src) = 0;
  virtual void add_inplace_impl(const Tensor& y, const Tensor& x) = 0;
  virtual void scale_inplace_impl(const Tensor& x, float s) = 0;
  virtual double sum_squares_impl(const Tensor& x) = 0;
  // Each tensor's sum of squares into out (xs.size()); the default calls sum_squares_impl.
  virtual void sum_squares_each_impl(std::span<const Tensor> xs, std::span<double> out) {
    for (size_t i = 0; i < xs.size(); ++i) out[i] = sum_squares_impl(xs[i]);
  }
  virtual void add_bias_impl(const Tensor& y, const Tensor& b) = 0;
  virtual void bias_backward_impl(const Tensor& db, const Tensor& dy) = 0;
  virtual void rmsnorm_forward_impl(const Tensor& y, const Tensor& x, const Tensor& g, float eps,
                                    float weight_offset) = 0;
  virtual void rmsnorm_backward_impl(const Tensor& dx, const Tensor& dg, const Tensor& dy,
                                     const Tensor& x, const Tensor& g, float eps,
                                     float weight_offset) = 0;
  virtual void rope_table_impl(const Tensor& table, std::span<const float> inv_freq,
                               float attention_factor, int64_t first_position) = 0;
  virtual void rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& table) = 0;
  virtual void rope_backward_impl(const Tensor& dx, const Tensor& positions,
                                  const Tensor& table) = 0;
  virtual void swiglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual void swiglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                    const Tensor& gate, const Tensor& up) = 0;
  virtual void geglu_forward_impl(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual void geglu_backward_impl(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                                   const Tensor& gate, const Tensor& up) = 0;
  virtual void softcap_forward_impl(const Tensor& x, float cap) = 0;
  virtual void softcap_backward_impl(const Tensor& dx, const Tensor& y, float cap) = 0;
  virtual void attention_forward_impl(const Tensor& out, const Tensor& lse, const Tensor& q,
                                      const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                      int64_t q_offset, const AttentionDims& dims) = 0;
  virtual void attention_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                       const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       const Tensor& seg_start, int64_t q_offset,
                                       const AttentionDims& dims) = 0;
  virtual void embedding_forward_impl(const Tensor& x, const Tensor& ids, const Tensor& table) = 0;
  virtual void embedding_backward_impl(const Tensor& dtable, const Tensor& dx, const Tensor& ids,
                                       int64_t padding_row) = 0;
  virtual void logsoftmax_target_impl(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                                      const Tensor& targets) = 0;
  virtual void dlogits_inplace_impl(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                    const Tensor& dlogp) = 0;
  virtual void argmax_rows_impl(const Tensor& out, const Tensor& logits) = 0;
  virtual void softmax_entropy_impl(const Tensor& entropy, const Tensor& logits,
                                    const Tensor& lse) = 0;
  virtual void dlogits_entropy_inplace_impl(const Tensor& logits, const Tensor& lse,
                                            const Tensor& targets, const Tensor& dlogp,
                                            const Tensor& entropy, const Tensor& dentropy) = 0;
  virtual void adamw_step_impl(const Tensor& param, const Tensor& grad, const Tensor& m,
                               const Tensor& v, const AdamWStep& s) = 0;

  int64_t flops_ = 0;

 private:
  // Checks that every tensor of op's call lives in this backend's memory.
  void owns(const char* op, std::initializer_list<const Tensor*> tensors) const;
  // Runs `impl` (the checked op's *_impl call); with a profile attached, times it and records
  // it under `family` with the bytes `bytes()` estimates. Defined in backend.cpp.
  template <class Bytes, class Impl>
  void run_op(OpFamily family, Bytes&& bytes, Impl&& impl);

  OpProfile* profile_ = nullptr;
  Pool* scratch_pool_ = nullptr;  // lent by the innermost ScratchLoan
  Ledger own_ledger_;             // the scratch of calls made without a loan
  Pool own_pool_{own_ledger_, *this};
  bool in_op_ = false;  // an op's implementation is running (inner public calls are not timed)
  // Copies queued and not yet waited for: the device-side tensor, the host-side one, the ticket.
  struct InFlight {
    Tensor device, host;
    CopyTicket ticket;
  };
  std::vector<InFlight> in_flight_;
  CopyTicket next_ticket_ = 1;
  int64_t offloaded_bytes_ = 0, prefetched_bytes_ = 0;
  CopyTicket queue_copy(const Tensor& device, const Tensor& host, bool to_host);
};

}  // namespace sbp
