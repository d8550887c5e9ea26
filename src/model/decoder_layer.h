#pragma once
// One Llama/Qwen/Gemma 3 decoder layer as explicit forward/backward passes over a ROW RANGE
// [s, e) of the packed stream (DESIGN §2). The layer does not know the execution mode: the
// engine calls kv_forward / rows_forward / rows_backward on whole-T or chunk ranges.
//
// Llama / Qwen:
//   a  = rmsnorm(x; g1)                        (n, d)
//   q  = rope(qnorm(a Wq^T + bq))              (n, H*h)
//   k  = rope(knorm(a Wk^T + bk)), v = a Wv^T + bv   written into full-length K, V (T, G*h)
//   o  = attention(q, K, V)                    (n, H*h), lse (n, H)
//   x2 = x + o Wo^T + bo                       (n, d)
//   b  = rmsnorm(x2; g2)                       (n, d)
//   y  = x2 + (silu(b Wg^T) * (b Wu^T)) Wd^T   (n, d)
// Gemma 3 (every rmsnorm scales by 1 + g; "sandwich" norms around attention and MLP):
//   a  = rmsnorm(x; g1)
//   q  = rope_l(qnorm(a Wq^T)), k = rope_l(knorm(a Wk^T)), v = a Wv^T
//   o  = attention_l(q, K, V)  scale query_pre_attn_scalar^-1/2; sliding layers: window w
//   p  = o Wo^T                                (n, d)
//   x2 = x + rmsnorm(p; g_ao)                  post_attention_layernorm
//   b  = rmsnorm(x2; g2)                       pre_feedforward_layernorm
//   m  = (gelu_tanh(b Wg^T) * (b Wu^T)) Wd^T   (n, d)
//   y  = x2 + rmsnorm(m; g_mo)                 post_feedforward_layernorm
// (rope_l: the local table, rope_local_base_freq, on sliding layers; the global one on full.)
#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/parameters.h"

namespace sbp {

// Per-step tensors shared by every layer.
struct StepTables {
  Tensor positions;  // (T) I32 position within the segment
  Tensor seg_start;  // (T) I32 first row of the row's segment
  Tensor rope;       // (P, h) F32 [cos | sin] rows for positions 0..P-1
  Tensor rope_local;  // (P, h) F32 the same for Gemma's sliding layers; undefined otherwise
};

// Full-length keys and values of one layer.
struct LayerKV {
  Buffer k;      // (T, G*h) after k-norm and rope
  Buffer v;      // (T, G*h)
  Buffer k_raw;  // (T, G*h) before k-norm; qk-norm models, only when kept for the backward
};

// Views of K/V rows of global rows [k0, k0 + k.rows()): the whole of a LayerKV (k0 = 0), or a
// sliding layer's window in stream mode (engine/window_stream.h), where k0 > 0 needs the window
// to start at or after k0 for every query row the call computes (backend.h, k_offset).
struct KVRows {
  Tensor k, v;   // (Tk, G*h)
  Tensor k_raw;  // (Tk, G*h) or undefined
  int64_t k0 = 0;
  KVRows() = default;
  KVRows(const LayerKV& kv)  // NOLINT(google-explicit-constructor): every layer's K/V is one
      : k(kv.k.view()), v(kv.v.view()), k_raw(kv.k_raw.defined() ? kv.k_raw.view() : Tensor()) {}
  // Rows [r0, r1) of this view (global rows k0 + r0 ...).
  KVRows rows(int64_t r0, int64_t r1) const;
};

// Intermediates of rows [begin, end) saved by rows_forward for rows_backward; n = end - begin.
struct ChunkActs {
  Buffer a;      // (n, d) input-norm output
  Buffer q_raw;  // (n, H*h) q projection before q-norm (qk-norm models only)
  Buffer q;      // (n, H*h) queries after norm and rope
  Buffer attn;   // (n, H*h) attention output
  Buffer lse;    // (n, H) F32 attention log-sum-exp
  Buffer x2;     // (n, d) residual stream after attention
  Buffer b;      // (n, d) post-attention norm output
  Buffer gate;   // (n, F)
  Buffer up;     // (n, F)
  Buffer act;    // (n, F) silu(gate) * up (gelu_tanh for Gemma)
  Buffer attn_proj;  // (n, d) Gemma: o Wo^T, the input of the post-attention norm
  Buffer mlp_out;    // (n, d) Gemma: the MLP output, the input of the post-feedforward norm
};

class DecoderLayerOps {
 public:
  // `layer` selects what differs between layers: the attention window and the rope table.
  DecoderLayerOps(const ModelConfig& cfg, Backend& be, Pool& pool, const StepTables& tables,
                  DType act_dtype, int64_t layer);

  // LoRA adapters of this layer (model/lora.h): every targeted projection computes
  // x W^T + s (x A^T) B^T. `g` (may be null) receives the adapters' gradients, which accumulate
  // (+=) like every weight gradient. Without a call the layer has no adapters.
  void set_lora(const LoraLayer* w, const LoraLayer* g, float scale);

  // Allocates K/V for T rows in category `c` (k_raw only if keep_k_raw and the model has qk-norm).
  LayerKV alloc_kv(int64_t T, Category c, bool keep_k_raw);

  // K/V of rows [s, s+n) from the layer input rows x (n, d), written into kv's rows s - kv.k0.
  void kv_forward(const LayerTensors& w, const Tensor& x, int64_t s, const KVRows& kv);

  // Forward of rows [s, s+n) given K/V of rows [kv.k0, s+n) (k0 = 0: all of them; k0 > 0 only on
  // a sliding layer, at or before every row's window start). Writes y (n, d) if defined; saves
  // intermediates into *save (allocated in `save_cat`) if non-null. Without y, the down
  // projection is skipped (a backward-only recompute does not need the layer output) — except
  // with sandwich norms, whose backward needs the MLP output.
  void rows_forward(const LayerTensors& w, const Tensor& x, int64_t s, const KVRows& kv,
                    const Tensor& y, ChunkActs* save, Category save_cat);

  // One decoding step of B sequences packed in one cache (engine/generate.cpp): x (B, d) holds
  // one new row of each sequence, at global row rows[b] of the packed stream and at position
  // positions[b] (B) I32 within its sequence. Their K/V are written into rows rows[b] of kv,
  // then row b attends to the keys of its own segment up to rows[b]: the computation of
  // rows_forward on the range [rows[b], rows[b] + 1), with the row-wise projections batched
  // into (B, ...) GEMMs. Writes y (B, d).
  void decode_forward(const LayerTensors& w, const Tensor& x, const Tensor& positions,
                      std::span<const int64_t> rows, LayerKV& kv, const Tensor& y);

  // Backward of rows [s, s+n). gy (n, d) F32: in dL/dy, out dL/dx (in place). The saved
  // intermediates are consumed: each is released as soon as the backward is done with it.
  // dK, dV F32 accumulators of kv's rows (global rows [kv.k0, ...); (T, G*h) for a whole
  // LayerKV): attention adds into rows [kv.k0, s+n); rows [s, s+n) must be
  // final after this chunk's attention backward (all later rows already processed), and are
  // then consumed here (their rope is undone in place). Weight gradients accumulate into gw.
  //
  // finish_kv false (context parallelism, engine/context_slice.h): rows [s, s+n)'s dK/dV are not
  // final yet (other ranks' queries add to them), so their part of the backward is left out:
  // gy then lacks the K/V path's share of dL/dx, which kv_backward adds once they are.
  void rows_backward(const LayerTensors& w, const LayerTensors& gw, const Tensor& x, int64_t s,
                     ChunkActs& acts, const KVRows& kv, const Tensor& dK, const Tensor& dV,
                     const Tensor& gy, bool finish_kv = true);

  // The K/V part of rows [s, s+n)'s backward that rows_backward(finish_kv = false) left out,
  // from their final dK, dV rows (consumed: their rope is undone in place): recomputes the
  // input norm of x (n, d), ADDS the K/V path's share of dL/dx into gy (n, d) F32 and the k/v
  // projection, k-norm and input-norm weight gradients into gw.
  void kv_backward(const LayerTensors& w, const LayerTensors& gw, const Tensor& x, int64_t s,
                   const KVRows& kv, const Tensor& dK, const Tensor& dV, const Tensor& gy);

 private:
  Buffer alloc(Category c, int64_t rows, int64_t cols, DType dt);
  // y (n, out) = x (n, in) W^T (+ bias) (+ the adapter of projection p)
  void linear(const Tensor& y, const Tensor& x, const Tensor& W, const Tensor& bias, LoraTarget p);
  // y (n, out) += s (x A^T) B^T when projection p has an adapter.
  void lora_forward(const Tensor& y, const Tensor& x, LoraTarget p);
  // dW += dy^T x, db += colsum(dy), and dx (+)= dy W (dx_beta 0: overwrite, 1: accumulate);
  // the adapter of p: dB += s dy^T (x A^T), dA += s (dy B)^T x, dx += s (dy B) A.
  // Frozen weights (dW undefined) get no gradient; dx always does.
  void linear_backward(const Tensor& dx, float dx_beta, const Tensor& dW, const Tensor& db,
                       const Tensor& dy, const Tensor& x, const Tensor& W, LoraTarget p);
  // The three parts of the forward of n rows, shared by rows_forward, kv_forward and
  // decode_forward. positions (n) I32 of the rows; a (n, d) the input-norm output.
  // k (n, G*h) = rope(knorm(a Wk^T + bk)), v (n, G*h) = a Wv^T + bv; k_raw (n, G*h) receives
  // the projection before the k-norm when defined (qk-norm models), else a scratch does.
  void project_kv(const LayerTensors& w, const Tensor& a, const Tensor& positions, const Tensor& k,
                  const Tensor& v, const Tensor& k_raw);
  // t.q (n, H*h) = rope(qnorm(a Wq^T + bq)), t.q_raw kept when `keep`; allocated in c.
  void project_queries(const LayerTensors& w, const Tensor& a, const Tensor& positions,
                       ChunkActs& t, Category c, bool keep);
  // From the attention output t.attn (n, H*h) and the layer input x (n, d): the output
  // projection, the residual, the MLP; y (n, d) if defined. Without `keep` every intermediate
  // is released as soon as it is used.
  void output_and_mlp(const LayerTensors& w, const Tensor& x, ChunkActs& t, const Tensor& y,
                      Category c, bool keep);
  // dK/dV rows [s, s+n) through rope, k-norm and the k/v projections: ADDS into da (n, d) F32,
  // the gradient of the input-norm output a (n, d), and into the weight gradients. ng: the
  // caller's frozen-norm scratch (norm_grad).
  void keys_values_backward(const LayerTensors& w, const LayerTensors& gw, const Tensor& a,
                            int64_t s, const KVRows& kv, const Tensor& dK, const Tensor& dV,
                            const Tensor& da, Buffer& ng);
  // dg itself, or (frozen norm weights: dg undefined) a zeroed (numel) scratch in `scratch`,
  // since the norm backward writes its weight gradient beside dx.
  Tensor norm_grad(const Tensor& dg, int64_t numel, Buffer& scratch);

  const ModelConfig& cfg_;
  Backend& be_;
  Pool& pool_;
  const StepTables& tables_;
  DType act_;
  AttentionDims dims_;
  Tensor rope_;  // this layer's rope table
  float off_;    // cfg.norm_weight_offset()
  const LoraLayer* lora_w_ = nullptr;  // adapters, or null
  const LoraLayer* lora_g_ = nullptr;  // their gradients, or null
  float lora_scale_ = 0.0f;
};

}  // namespace sbp
