#pragma once
// Backend: the kernels the model needs, behind one interface, so that the shape-only
// planner (meta) and a GPU backend can run the very same model and engine code.
//
// Conventions (DESIGN §6):
//  - every tensor is a contiguous row-major view; "(n, d)" comments give shapes;
//  - backward kernels ACCUMULATE into their gradient outputs (+=); zeroing is fill();
//  - index tensors (token ids, positions, segment starts, targets) are I32;
//  - reductions have a fixed order: same inputs + thread count => same bits.
#include <cstdint>
#include <span>
#include <string>

#include "core/tensor.h"

namespace sbp {

struct AttentionDims {
  int64_t n_heads = 0;     // H query heads
  int64_t n_kv_heads = 0;  // G key/value heads; query head j reads kv head j / (H / G)
  int64_t head_dim = 0;    // h
  float scale = 0.0f;      // softmax scale, usually 1/sqrt(h)
};

struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;  // 1-based, for bias correction
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // False for the shape-only backend: kernels do nothing, tensors have no data.
  virtual bool computes() const = 0;

  // ---- dense ----
  // C (M, N) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T; A, B, C viewed as (rows, cols).
  virtual void gemm(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                    float alpha, float beta) = 0;

  // ---- elementwise and reductions ----
  virtual void fill(const Tensor& x, float value) = 0;
  // dst = src (same numel); converts between F32 and BF16 where the dtypes differ.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void add_inplace(const Tensor& y, const Tensor& x) = 0;  // y += x
  virtual void scale_inplace(const Tensor& x, float s) = 0;        // x *= s
  virtual double sum_squares(const Tensor& x) = 0;                 // fp64, fixed order
  virtual void add_bias(const Tensor& y, const Tensor& b) = 0;     // y (n, m) += b (m)
  virtual void bias_backward(const Tensor& db, const Tensor& dy) = 0;  // db (m) += sum_rows dy (n, m)

  // ---- RMSNorm over the last dimension: x viewed as (rows, d), g (d) ----
  // y = x / sqrt(mean(x^2) + eps) * g
  virtual void rmsnorm_forward(const Tensor& y, const Tensor& x, const Tensor& g, float eps) = 0;
  // dx += ..., dg += ... (recomputes the row statistics from x)
  virtual void rmsnorm_backward(const Tensor& dx, const Tensor& dg, const Tensor& dy,
                                const Tensor& x, const Tensor& g, float eps) = 0;

  // ---- rotary embedding (Hugging Face "rotate_half" layout) ----
  // table (P, h): row p holds cos(p * inv_freq) in [0, h/2) and sin(p * inv_freq) in [h/2, h).
  virtual void rope_table(const Tensor& table, std::span<const float> inv_freq) = 0;
  // x (n, nh * h), in place; positions (n) I32 index rows of the table.
  virtual void rope_forward(const Tensor& x, const Tensor& positions, const Tensor& table) = 0;
  // Inverse rotation, in place: turns d(rotated) into d(unrotated).
  virtual void rope_backward(const Tensor& dx, const Tensor& positions, const Tensor& table) = 0;

  // ---- SwiGLU: out = silu(gate) * up, all (n, F) ----
  virtual void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) = 0;
  virtual void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                               const Tensor& gate, const Tensor& up) = 0;

  // ---- attention: causal within segments, GQA, query offset; never a T x T buffer ----
  // q (n, H*h): queries of global rows [q_offset, q_offset + n).
  // k, v (Tk, G*h): keys/values of global rows [0, Tk), Tk >= q_offset + n.
  // seg_start (>= q_offset + n) I32, indexed by global row: the first row of that row's
  // segment. Query row i attends to keys j with seg_start[i] <= j <= i.
  // out (n, H*h); lse (n, H) F32: log-sum-exp of the scaled scores per row and head.
  virtual void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                 int64_t q_offset, const AttentionDims& dims) = 0;
  // dq (n, H*h) +=, dk, dv (Tk, G*h) +=; recomputes the probabilities from q, k, lse.
  virtual void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                  const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const Tensor& seg_start, int64_t q_offset,
                                  const AttentionDims& dims) = 0;

  // ---- embedding ----
  virtual void embedding_forward(const Tensor& x, const Tensor& ids, const Tensor& table) = 0;
  // dtable (V, d) += scatter of dx (n, d) by ids (n); fixed order
  virtual void embedding_backward(const Tensor& dtable, const Tensor& dx, const Tensor& ids) = 0;

  // ---- LM head ----
  // logits (n, V); targets (n) I32, < 0 = no target. lse (n) = logsumexp(logits row);
  // logp (n) = logits[target] - lse (0 where there is no target).
  virtual void logsoftmax_target(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                                 const Tensor& targets) = 0;
  // Overwrites logits with dL/dlogits = dlogp * (onehot(target) - softmax(logits)) per row;
  // rows without a target become zero.
  virtual void dlogits_inplace(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                               const Tensor& dlogp) = 0;

  // out (n) I32: index of the largest logit of each row (the first one on ties).
  virtual void argmax_rows(const Tensor& out, const Tensor& logits) = 0;

  // entropy (n) = -sum_j p_j log p_j of each row's softmax p = softmax(logits row), given the
  // row's lse (n) from logsoftmax_target. Summed as sum_j p_j (lse - logit_j): terms >= 0, so
  // no cancellation. For entropy bonuses and entropy logging (GRPO, PPO).
  virtual void softmax_entropy(const Tensor& entropy, const Tensor& logits,
                               const Tensor& lse) = 0;
  // dlogits_inplace plus the entropy's gradient: overwrites logits with
  //   dL/dlogit_j = dlogp (onehot_j - p_j) + dentropy * p_j (lse - logit_j - H)
  // (dH/dlogit_j = -p_j (log p_j + H)); entropy (n) = H from softmax_entropy, dentropy (n).
  // Rows without a target keep only the entropy term.
  virtual void dlogits_entropy_inplace(const Tensor& logits, const Tensor& lse,
                                       const Tensor& targets, const Tensor& dlogp,
                                       const Tensor& entropy, const Tensor& dentropy) = 0;

  // ---- optimizer ----
  // Decoupled weight decay, bias-corrected moments, fp32 states m, v.
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                          const Tensor& v, const AdamWStep& s) = 0;

  // FLOPs performed by gemm and attention since the last reset (counted by the kernels,
  // recomputation included), for the achieved-GFLOP/s figure of `streambp bench`.
  int64_t flops() const { return flops_; }
  void reset_flops() { flops_ = 0; }

 protected:
  int64_t flops_ = 0;
};

}  // namespace sbp
