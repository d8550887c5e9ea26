#include "model/decoder_layer.h"

#include <cmath>

namespace sbp {

DecoderLayerOps::DecoderLayerOps(const ModelConfig& cfg, Backend& be, Pool& pool,
                                 const StepTables& tables, DType act_dtype, int64_t layer)
    : cfg_(cfg),
      be_(be),
      pool_(pool),
      tables_(tables),
      act_(act_dtype),
      off_(cfg.norm_weight_offset()) {
  dims_.n_heads = cfg.num_attention_heads;
  dims_.n_kv_heads = cfg.num_key_value_heads;
  dims_.head_dim = cfg.head_dim;
  dims_.scale = cfg.attention_scale();
  dims_.window = cfg.layer_window(layer);
  // Gemma's sliding layers rotate with their own rope; Qwen2's and Qwen3's with the model's.
  const bool local = cfg.gemma() && cfg.layer_is_sliding(layer);
  SBP_CHECK(!local || tables.rope_local.defined(), "sliding layer without a local rope table");
  rope_ = local ? tables.rope_local : tables.rope;
}

Buffer DecoderLayerOps::alloc(Category c, int64_t rows, int64_t cols, DType dt) {
  return pool_.allocate(c, dt, {rows, cols});
}

void DecoderLayerOps::set_lora(const LoraLayer* w, const LoraLayer* g, float scale) {
  lora_w_ = w;
  lora_g_ = g;
  lora_scale_ = scale;
}

void DecoderLayerOps::linear(const Tensor& y, const Tensor& x, const Tensor& W, const Tensor& bias,
                             LoraTarget p) {
  be_.gemm(y, x, false, W, true, 1.0f, 0.0f);
  if (bias.defined()) be_.add_bias(y, bias);
  lora_forward(y, x, p);
}

void DecoderLayerOps::lora_forward(const Tensor& y, const Tensor& x, LoraTarget p) {
  if (!lora_w_ || !(*lora_w_)[p].defined()) return;
  const LoraPair& ad = (*lora_w_)[p];
  // u (n, r) = x A^T, in the activation dtype like every other projection output.
  Buffer u = alloc(Category::layer_workspace, x.rows(), ad.A.rows(), act_);
  be_.gemm(u.view(), x, false, ad.A, true, 1.0f, 0.0f);
  be_.gemm(y, u.view(), false, ad.B, true, lora_scale_, 1.0f);  // (n, out) += s u B^T
}

void DecoderLayerOps::linear_backward(const Tensor& dx, float dx_beta, const Tensor& dW,
                                      const Tensor& db, const Tensor& dy, const Tensor& x,
                                      const Tensor& W, LoraTarget p) {
  if (dW.defined())
    be_.gemm(dW, dy, true, x, false, 1.0f, 1.0f);  // (out, in) += (n, out)^T (n, in)
  if (db.defined()) be_.bias_backward(db, dy);
  if (dx.defined())
    be_.gemm(dx, dy, false, W, false, 1.0f, dx_beta);  // (n, in) = (n, out) (out, in)
  if (!lora_w_ || !(*lora_w_)[p].defined()) return;
  const LoraPair& ad = (*lora_w_)[p];
  const int64_t n = x.rows(), r = ad.A.rows();
  // The forward's u = x A^T, recomputed: (n, r) is cheap next to the projection itself, and
  // keeping it would add a tensor per projection to every saved chunk.
  Buffer u = alloc(Category::layer_workspace, n, r, act_);  // (n, r)
  be_.gemm(u.view(), x, false, ad.A, true, 1.0f, 0.0f);
  Buffer du = alloc(Category::layer_workspace, n, r, DType::F32);  // (n, r) = s dy B
  be_.gemm(du.view(), dy, false, ad.B, false, lora_scale_, 0.0f);
  if (lora_g_) {
    const LoraPair& g = (*lora_g_)[p];
    be_.gemm(g.B, dy, true, u.view(), false, lora_scale_, 1.0f);  // (out, r) += s dy^T u
    be_.gemm(g.A, du.view(), true, x, false, 1.0f, 1.0f);         // (r, in) += du^T x
  }
  if (dx.defined()) be_.gemm(dx, du.view(), false, ad.A, false, 1.0f, 1.0f);  // (n, in) += du A
}

Tensor DecoderLayerOps::norm_grad(const Tensor& dg, int64_t numel, Buffer& scratch) {
  if (dg.defined()) return dg;
  scratch = pool_.zeros(Category::layer_workspace, DType::F32, {numel});
  return scratch.view();
}

KVRows KVRows::rows(int64_t r0, int64_t r1) const {
  KVRows r;
  r.k = k.slice_rows(r0, r1);
  r.v = v.slice_rows(r0, r1);
  if (k_raw.defined()) r.k_raw = k_raw.slice_rows(r0, r1);
  r.k0 = k0 + r0;
  return r;
}

LayerKV DecoderLayerOps::alloc_kv(int64_t T, Category c, bool keep_k_raw) {
  const int64_t Gh = cfg_.num_key_value_heads * cfg_.head_dim;
  LayerKV kv;
  kv.k = alloc(c, T, Gh, act_);
  kv.v = alloc(c, T, Gh, act_);
  if (keep_k_raw && cfg_.qk_norm()) kv.k_raw = alloc(c, T, Gh, act_);
  return kv;
}

void DecoderLayerOps::project_kv(const LayerTensors& w, const Tensor& a, const Tensor& positions,
                                 const Tensor& k, const Tensor& v, const Tensor& k_raw) {
  const int64_t n = a.rows(), Gh = cfg_.num_key_value_heads * cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  if (cfg_.qk_norm()) {
    Buffer tmp;
    Tensor raw = k_raw;  // (n, G*h) before k-norm
    if (!raw.defined()) {
      tmp = alloc(Category::layer_workspace, n, Gh, act_);
      raw = tmp.view();
    }
    linear(raw, a, w.k_proj, w.k_bias, LoraTarget::k_proj);
    be_.rmsnorm_forward(k, raw, w.k_norm, eps, off_);
  } else {
    linear(k, a, w.k_proj, w.k_bias, LoraTarget::k_proj);
  }
  be_.rope_forward(k, positions, rope_);
  linear(v, a, w.v_proj, w.v_bias, LoraTarget::v_proj);
}

void DecoderLayerOps::project_queries(const LayerTensors& w, const Tensor& a,
                                      const Tensor& positions, ChunkActs& t, Category c,
                                      bool keep) {
  const int64_t n = a.rows(), Hh = cfg_.num_attention_heads * cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  t.q = alloc(c, n, Hh, act_);  // (n, H*h)
  if (cfg_.qk_norm()) {
    t.q_raw = alloc(c, n, Hh, act_);
    linear(t.q_raw.view(), a, w.q_proj, w.q_bias, LoraTarget::q_proj);
    be_.rmsnorm_forward(t.q.view(), t.q_raw.view(), w.q_norm, eps, off_);
    if (!keep) t.q_raw.reset();
  } else {
    linear(t.q.view(), a, w.q_proj, w.q_bias, LoraTarget::q_proj);
  }
  be_.rope_forward(t.q.view(), positions, rope_);
}

void DecoderLayerOps::kv_forward(const LayerTensors& w, const Tensor& x, int64_t s,
                                 const KVRows& kv) {
  const int64_t n = x.rows(), d = cfg_.hidden_size;
  const int64_t r = s - kv.k0;                              // kv's row of global row s
  Buffer a = alloc(Category::layer_workspace, n, d, act_);  // (n, d)
  be_.rmsnorm_forward(a.view(), x, w.input_norm, static_cast<float>(cfg_.rms_norm_eps), off_);
  project_kv(w, a.view(), tables_.positions.slice_rows(s, s + n), kv.k.slice_rows(r, r + n),
             kv.v.slice_rows(r, r + n),
             kv.k_raw.defined() ? kv.k_raw.slice_rows(r, r + n) : Tensor());
}

void DecoderLayerOps::rows_forward(const LayerTensors& w, const Tensor& x, int64_t s,
                                   const KVRows& kv, const Tensor& y, ChunkActs* save,
                                   Category save_cat) {
  const int64_t n = x.rows(), d = cfg_.hidden_size;
  const int64_t H = cfg_.num_attention_heads, Hh = H * cfg_.head_dim;
  const bool keep = save != nullptr;
  const Category c = keep ? save_cat : Category::layer_workspace;
  ChunkActs local;
  ChunkActs& t = keep ? *save : local;

  t.a = alloc(c, n, d, act_);  // (n, d)
  be_.rmsnorm_forward(t.a.view(), x, w.input_norm, static_cast<float>(cfg_.rms_norm_eps), off_);
  project_queries(w, t.a.view(), tables_.positions.slice_rows(s, s + n), t, c, keep);
  if (!keep) t.a.reset();

  t.attn = alloc(c, n, Hh, act_);      // (n, H*h)
  t.lse = alloc(c, n, H, DType::F32);  // (n, H)
  AttentionDims dims = dims_;
  dims.k_offset = kv.k0;
  be_.attention_forward(t.attn.view(), t.lse.view(), t.q.view(), kv.k, kv.v, tables_.seg_start, s,
                        dims);
  if (!keep) {
    t.q.reset();
    t.lse.reset();
  }
  output_and_mlp(w, x, t, y, c, keep);
}

void DecoderLayerOps::decode_forward(const LayerTensors& w, const Tensor& x,
                                     const Tensor& positions, std::span<const int64_t> rows,
                                     LayerKV& kv, const Tensor& y) {
  const int64_t B = x.rows(), d = cfg_.hidden_size;
  const int64_t H = cfg_.num_attention_heads, Hh = H * cfg_.head_dim;
  const int64_t Gh = cfg_.num_key_value_heads * cfg_.head_dim;
  SBP_CHECK(static_cast<int64_t>(rows.size()) == B && positions.numel() == B,
            "decode_forward: one row and one position per sequence");
  const Category c = Category::layer_workspace;
  ChunkActs t;
  t.a = alloc(c, B, d, act_);  // (B, d)
  be_.rmsnorm_forward(t.a.view(), x, w.input_norm, static_cast<float>(cfg_.rms_norm_eps), off_);
  {
    // The B new keys/values side by side, then each into its sequence's row of the cache.
    Buffer k = alloc(c, B, Gh, act_);  // (B, G*h)
    Buffer v = alloc(c, B, Gh, act_);  // (B, G*h)
    project_kv(w, t.a.view(), positions, k.view(), v.view(), Tensor());
    for (int64_t b = 0; b < B; ++b) {
      const int64_t r = rows[static_cast<size_t>(b)];
      be_.copy(kv.k.rows(r, r + 1), k.rows(b, b + 1));
      be_.copy(kv.v.rows(r, r + 1), v.rows(b, b + 1));
    }
  }
  project_queries(w, t.a.view(), positions, t, c, false);
  t.a.reset();
  t.attn = alloc(c, B, Hh, act_);      // (B, H*h)
  t.lse = alloc(c, B, H, DType::F32);  // (B, H)
  for (int64_t b = 0; b < B; ++b)  // each row against its own segment's keys
    be_.attention_forward(t.attn.rows(b, b + 1), t.lse.rows(b, b + 1), t.q.rows(b, b + 1),
                          kv.k.view(), kv.v.view(), tables_.seg_start,
                          rows[static_cast<size_t>(b)], dims_);
  t.q.reset();
  t.lse.reset();
  output_and_mlp(w, x, t, y, c, false);
}

void DecoderLayerOps::output_and_mlp(const LayerTensors& w, const Tensor& x, ChunkActs& t,
                                     const Tensor& y, Category c, bool keep) {
  const int64_t n = x.rows(), d = cfg_.hidden_size, F = cfg_.intermediate_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  t.x2 = alloc(c, n, d, act_);  // (n, d) = x + attn Wo^T + bo
  if (cfg_.sandwich_norms()) {
    // x2 = x + rmsnorm(p; g_ao), p = attn Wo^T (+ bo). Normed output first, then the residual
    // add, each rounded once in bf16: the order transformers computes.
    t.attn_proj = alloc(c, n, d, act_);  // (n, d)
    linear(t.attn_proj.view(), t.attn.view(), w.o_proj, w.o_bias, LoraTarget::o_proj);
    be_.rmsnorm_forward(t.x2.view(), t.attn_proj.view(), w.attn_out_norm, eps, off_);
    be_.add_inplace(t.x2.view(), x);
    if (!keep) t.attn_proj.reset();
  } else {
    be_.copy(t.x2.view(), x);
    be_.gemm(t.x2.view(), t.attn.view(), false, w.o_proj, true, 1.0f, 1.0f);
    if (w.o_bias.defined()) be_.add_bias(t.x2.view(), w.o_bias);
    lora_forward(t.x2.view(), t.attn.view(), LoraTarget::o_proj);
  }
  if (!keep) t.attn.reset();

  t.b = alloc(c, n, d, act_);  // (n, d)
  be_.rmsnorm_forward(t.b.view(), t.x2.view(), w.post_norm, eps, off_);
  t.gate = alloc(c, n, F, act_);  // (n, F)
  t.up = alloc(c, n, F, act_);    // (n, F)
  linear(t.gate.view(), t.b.view(), w.gate_proj, Tensor(), LoraTarget::gate_proj);
  linear(t.up.view(), t.b.view(), w.up_proj, Tensor(), LoraTarget::up_proj);
  if (!keep) t.b.reset();
  t.act = alloc(c, n, F, act_);  // (n, F)
  if (cfg_.gelu_mlp())
    be_.geglu_forward(t.act.view(), t.gate.view(), t.up.view());
  else
    be_.swiglu_forward(t.act.view(), t.gate.view(), t.up.view());
  if (!keep) {
    t.gate.reset();
    t.up.reset();
  }
  if (cfg_.sandwich_norms()) {
    // y = x2 + rmsnorm(m; g_mo), m = act Wd^T: the backward needs m, so it is computed even
    // without y.
    t.mlp_out = alloc(c, n, d, act_);  // (n, d)
    linear(t.mlp_out.view(), t.act.view(), w.down_proj, Tensor(), LoraTarget::down_proj);
    if (y.defined()) {
      be_.rmsnorm_forward(y, t.mlp_out.view(), w.mlp_out_norm, eps, off_);
      be_.add_inplace(y, t.x2.view());
    }
    if (!keep) t.mlp_out.reset();
  } else if (y.defined()) {
    be_.copy(y, t.x2.view());
    be_.gemm(y, t.act.view(), false, w.down_proj, true, 1.0f, 1.0f);
    lora_forward(y, t.act.view(), LoraTarget::down_proj);
  }
}

void DecoderLayerOps::rows_backward(const LayerTensors& w, const LayerTensors& gw, const Tensor& x,
                                    int64_t s, ChunkActs& t, const KVRows& kv, const Tensor& dK,
                                    const Tensor& dV, const Tensor& gy, bool finish_kv) {
  const int64_t n = x.rows(), d = cfg_.hidden_size, F = cfg_.intermediate_size;
  const int64_t Hh = cfg_.num_attention_heads * cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const Category ws = Category::layer_workspace;
  const Tensor positions = tables_.positions.slice_rows(s, s + n);
  Buffer ng;  // frozen norm weights: scratch for the weight gradient the norm backward writes

  // MLP: y = x2 + act Wd^T (Gemma: x2 + rmsnorm(act Wd^T)). gy doubles as d(x2) from here on
  // (the residual path).
  {
    Buffer dm;       // (n, d) Gemma: gradient of the MLP output m
    Tensor dmlp = gy;  // gradient of act Wd^T
    if (cfg_.sandwich_norms()) {
      dm = pool_.zeros(ws, DType::F32, {n, d});
      be_.rmsnorm_backward(dm.view(), norm_grad(gw.mlp_out_norm, w.mlp_out_norm.numel(), ng), gy,
                           t.mlp_out.view(), w.mlp_out_norm, eps, off_);
      t.mlp_out.reset();
      dmlp = dm.view();
    }
    Buffer dact = alloc(ws, n, F, DType::F32);  // (n, F)
    linear_backward(dact.view(), 0.0f, gw.down_proj, Tensor(), dmlp, t.act.view(), w.down_proj,
                    LoraTarget::down_proj);
    dm.reset();
    t.act.reset();
    Buffer dgate = pool_.zeros(ws, DType::F32, {n, F});  // (n, F)
    Buffer dup = pool_.zeros(ws, DType::F32, {n, F});    // (n, F)
    if (cfg_.gelu_mlp())
      be_.geglu_backward(dgate.view(), dup.view(), dact.view(), t.gate.view(), t.up.view());
    else
      be_.swiglu_backward(dgate.view(), dup.view(), dact.view(), t.gate.view(), t.up.view());
    dact.reset();
    t.gate.reset();
    t.up.reset();
    Buffer db = alloc(ws, n, d, DType::F32);  // (n, d)
    linear_backward(db.view(), 0.0f, gw.gate_proj, Tensor(), dgate.view(), t.b.view(), w.gate_proj,
                    LoraTarget::gate_proj);
    dgate.reset();
    linear_backward(db.view(), 1.0f, gw.up_proj, Tensor(), dup.view(), t.b.view(), w.up_proj,
                    LoraTarget::up_proj);
    dup.reset();
    t.b.reset();
    be_.rmsnorm_backward(gy, norm_grad(gw.post_norm, w.post_norm.numel(), ng), db.view(),
                         t.x2.view(), w.post_norm, eps, off_);
    t.x2.reset();
  }

  // Attention output projection and attention: x2 = x + attn Wo^T + bo (Gemma: x + rmsnorm(p)).
  Buffer da = alloc(ws, n, d, DType::F32);  // (n, d) gradient of the input-norm output
  {
    Buffer dp;         // (n, d) Gemma: gradient of p = attn Wo^T
    Tensor dproj = gy;  // gradient of attn Wo^T + bo
    if (cfg_.sandwich_norms()) {
      dp = pool_.zeros(ws, DType::F32, {n, d});
      be_.rmsnorm_backward(dp.view(), norm_grad(gw.attn_out_norm, w.attn_out_norm.numel(), ng), gy,
                           t.attn_proj.view(), w.attn_out_norm, eps, off_);
      t.attn_proj.reset();
      dproj = dp.view();
    }
    Buffer dattn = alloc(ws, n, Hh, DType::F32);  // (n, H*h)
    linear_backward(dattn.view(), 0.0f, gw.o_proj, gw.o_bias, dproj, t.attn.view(), w.o_proj,
                    LoraTarget::o_proj);
    dp.reset();
    Buffer dq = pool_.zeros(ws, DType::F32, {n, Hh});  // (n, H*h)
    AttentionDims dims = dims_;
    dims.k_offset = kv.k0;
    be_.attention_backward(dq.view(), dK, dV, dattn.view(), t.q.view(), kv.k, kv.v, t.attn.view(),
                           t.lse.view(), tables_.seg_start, s, dims);
    dattn.reset();
    t.attn.reset();
    t.q.reset();
    t.lse.reset();
    be_.rope_backward(dq.view(), positions, rope_);
    if (cfg_.qk_norm()) {
      Buffer dq_raw = pool_.zeros(ws, DType::F32, {n, Hh});  // (n, H*h)
      be_.rmsnorm_backward(dq_raw.view(), norm_grad(gw.q_norm, w.q_norm.numel(), ng), dq.view(),
                           t.q_raw.view(), w.q_norm, eps, off_);
      dq = std::move(dq_raw);
      t.q_raw.reset();
    }
    linear_backward(da.view(), 0.0f, gw.q_proj, gw.q_bias, dq.view(), t.a.view(), w.q_proj,
                    LoraTarget::q_proj);
  }

  // Keys and values of rows [s, s+n): complete now, since every query that sees them
  // (rows >= s) has been processed — unless another rank's queries still add to them (context
  // parallelism: kv_backward, once their sums have arrived).
  if (finish_kv) keys_values_backward(w, gw, t.a.view(), s, kv, dK, dV, da.view(), ng);
  t.a.reset();
  // Input norm; gy becomes dL/dx = d(x2) + rmsnorm_backward(da).
  be_.rmsnorm_backward(gy, norm_grad(gw.input_norm, w.input_norm.numel(), ng), da.view(), x,
                       w.input_norm, eps, off_);
}

void DecoderLayerOps::keys_values_backward(const LayerTensors& w, const LayerTensors& gw,
                                           const Tensor& a, int64_t s, const KVRows& kv,
                                           const Tensor& dK, const Tensor& dV, const Tensor& da,
                                           Buffer& ng) {
  const int64_t n = a.rows();
  const int64_t Gh = cfg_.num_key_value_heads * cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const Category ws = Category::layer_workspace;
  const Tensor positions = tables_.positions.slice_rows(s, s + n);
  const int64_t r = s - kv.k0;                // kv's (and dK's) row of global row s
  const Tensor dk = dK.slice_rows(r, r + n);  // (n, G*h)
  be_.rope_backward(dk, positions, rope_);
  if (cfg_.qk_norm()) {
    Buffer k_raw_tmp;
    Tensor k_raw;  // (n, G*h)
    if (kv.k_raw.defined()) {
      k_raw = kv.k_raw.slice_rows(r, r + n);
    } else {  // recompute a Wk^T: the one extra product StreamBP pays per chunk
      k_raw_tmp = alloc(ws, n, Gh, act_);
      linear(k_raw_tmp.view(), a, w.k_proj, w.k_bias, LoraTarget::k_proj);
      k_raw = k_raw_tmp.view();
    }
    Buffer dk_raw = pool_.zeros(ws, DType::F32, {n, Gh});  // (n, G*h)
    be_.rmsnorm_backward(dk_raw.view(), norm_grad(gw.k_norm, w.k_norm.numel(), ng), dk, k_raw,
                         w.k_norm, eps, off_);
    k_raw_tmp.reset();
    linear_backward(da, 1.0f, gw.k_proj, gw.k_bias, dk_raw.view(), a, w.k_proj,
                    LoraTarget::k_proj);
  } else {
    linear_backward(da, 1.0f, gw.k_proj, gw.k_bias, dk, a, w.k_proj, LoraTarget::k_proj);
  }
  linear_backward(da, 1.0f, gw.v_proj, gw.v_bias, dV.slice_rows(r, r + n), a, w.v_proj,
                  LoraTarget::v_proj);
}

void DecoderLayerOps::kv_backward(const LayerTensors& w, const LayerTensors& gw, const Tensor& x,
                                  int64_t s, const KVRows& kv, const Tensor& dK, const Tensor& dV,
                                  const Tensor& gy) {
  const int64_t n = x.rows(), d = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const Category ws = Category::layer_workspace;
  Buffer ng;
  Buffer a = alloc(ws, n, d, act_);  // (n, d) the input-norm output, recomputed
  be_.rmsnorm_forward(a.view(), x, w.input_norm, eps, off_);
  Buffer da = pool_.zeros(ws, DType::F32, {n, d});  // (n, d) its gradient through K and V
  keys_values_backward(w, gw, a.view(), s, kv, dK, dV, da.view(), ng);
  a.reset();
  // The input norm's backward is linear in da: this adds the K/V path's share of dL/dx.
  be_.rmsnorm_backward(gy, norm_grad(gw.input_norm, w.input_norm.numel(), ng), da.view(), x,
                       w.input_norm, eps, off_);
}

}  // namespace sbp
