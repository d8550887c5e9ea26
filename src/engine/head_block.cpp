#include "engine/head_block.h"
#include "objective_kernels/objective_kernels.h"

namespace sbp {

HeadBlock::HeadBlock(const ModelConfig& cfg, Backend& be, Pool& pool, const ModelTensors& W,
                     DType act, HeadKind kind, bool entropy, const Tensor& hidden,
                     const Tensor& targets, int64_t row_begin, bool to_host)
    : cfg_(cfg),
      be_(be),
      pool_(pool),
      W_(W),
      kind_(kind),
      entropy_(entropy && kind == HeadKind::lm),
      hidden_(hidden),
      targets_(targets),
      row_begin_(row_begin),
      n_(hidden.rows()) {
  // A profile (bench --profile) counts this block's GEMMs as the LM head's, not the layers'.
  const ProfileRegion head(be.profile(), OpRegion::head);
  const int64_t n = n_, d = cfg.hidden_size;
  hf_ = pool.allocate(Category::layer_workspace, act, {n, d});
  be.rmsnorm_forward(hf_.view(), hidden, W.final_norm, static_cast<float>(cfg.rms_norm_eps),
                     cfg.norm_weight_offset());
  if (kind == HeadKind::value) {
    SBP_CHECK(W.score.defined(), "value objective on a model without a value head (score.weight)");
    out_ = pool.allocate(Category::logits, DType::F32, {n, 1});  // (n, 1)
    be.gemm(out_.view(), hf_.view(), false, W.score, true, 1.0f, 0.0f);
    if (be.computes() && to_host) value_host_ = download_f32(out_.view());
    return;
  }
  SBP_CHECK(W.lm_head.defined(), "LM-head objective on a model without an LM head");
  out_ = pool.allocate(Category::logits, act, {n, cfg.vocab_size});  // (n, V) act dtype
  be.gemm(out_.view(), hf_.view(), false, W.lm_head, true, 1.0f, 0.0f);
  if (cfg.final_logit_softcapping > 0) {
    // Gemma: logits = c tanh(z / c). The backward needs the capped values after dlogits has
    // overwritten them, so they are kept: a second (n, V) block, for soft-capped models only.
    be.softcap_forward(out_.view(), static_cast<float>(cfg.final_logit_softcapping));
    capped_ = pool.allocate(Category::logits, act, {n, cfg.vocab_size});  // (n, V)
    be.copy(capped_.view(), out_.view());
  }
  lse_ = pool.allocate(Category::other, DType::F32, {n});   // (n)
  logp_ = pool.allocate(Category::other, DType::F32, {n});  // (n)
  be.logsoftmax_target(lse_.view(), logp_.view(), out_.view(), targets);
  if (entropy_) {
    ent_ = pool.allocate(Category::other, DType::F32, {n});  // (n)
    be.softmax_entropy(ent_.view(), out_.view(), lse_.view());
  }
  // The objective sees the block's per-row numbers in host memory: n floats each way.
  if (be.computes() && to_host) {
    logp_host_ = download_f32(logp_.view());
    if (entropy_) ent_host_ = download_f32(ent_.view());
  }
}

TokenChunk HeadBlock::chunk() const {
  TokenChunk t;
  t.row_begin = row_begin_;
  t.value = value_host_;
  t.logp = logp_host_;
  t.entropy = ent_host_;
  return t;
}

TokenChunkGrads HeadBlock::alloc_grads() {
  const size_t n = be_.computes() ? static_cast<size_t>(n_) : 0;
  dlogp_ = pool_.allocate(Category::other, DType::F32, {n_});  // (n)
  dlogp_host_.assign(n, 0.0f);
  TokenChunkGrads g;
  if (kind_ == HeadKind::value) {
    g.dvalue = dlogp_host_;
    return g;
  }
  g.dlogp = dlogp_host_;
  if (entropy_) {
    dent_ = pool_.allocate(Category::other, DType::F32, {n_});  // (n)
    dent_host_.assign(n, 0.0f);
    g.dentropy = dent_host_;
  }
  return g;
}

Tensor HeadBlock::device_rows(int width, const Rows& rows) {
  dlogp_ = pool_.allocate(Category::other, DType::F32, {n_});  // (n)
  grads_on_device_ = true;
  if (rows.device.defined()) return rows.device;  // (n, width), checked by the op
  rows_ = pool_.allocate(Category::other, DType::F32, {n_, width});  // (n, width)
  if (be_.computes()) upload_f32(rows_.view(), rows.host);
  return rows_.view();
}

void HeadBlock::policy_grads(const PolicyTerms& terms, const Rows& rows, const Tensor& ref) {
  SBP_CHECK(kind_ == HeadKind::lm, "head block: policy gradients on a value head");
  const Tensor r = device_rows(kPolicyRowWidth, rows);                      // (n, 4)
  if (entropy_) dent_ = pool_.allocate(Category::other, DType::F32, {n_});  // (n)
  policy_token_grads(be_, dlogp_.view(), entropy_ ? dent_.view() : Tensor(), logp_.view(), r, terms,
                     ref);
  rows_.reset();
  entropy_grad_ = entropy_ && terms.entropy_coef != 0.0;
}

void HeadBlock::value_grads(const ValueTerms& terms, const Rows& rows) {
  SBP_CHECK(kind_ == HeadKind::value, "head block: value gradients on an LM head");
  const Tensor r = device_rows(kValueRowWidth, rows);  // (n, 3); dlogp_ holds dL/dvalues
  value_token_grads(be_, dlogp_.view(), out_.view().reshaped({n_}), r, terms);
  rows_.reset();
}

void HeadBlock::grads_from(const Tensor& dlogp) {
  SBP_CHECK(kind_ == HeadKind::lm && !entropy_,
            "head block: device gradients of the log-probs alone on an LM head");
  dlogp_ = pool_.allocate(Category::other, DType::F32, {n_});  // (n)
  be_.copy(dlogp_.view(), dlogp);
  grads_on_device_ = true;
}

void HeadBlock::backward(const ModelTensors& G, const Tensor& gy) {
  const ProfileRegion head(be_.profile(), OpRegion::head);
  const int64_t n = n_, d = cfg_.hidden_size;
  const Tensor W = kind_ == HeadKind::value ? W_.score : W_.lm_head;  // (V, d) or (1, d)
  const Tensor dW = kind_ == HeadKind::value ? G.score : G.lm_head;
  if (be_.computes() && !grads_on_device_) {  // the objective's gradients, into the backend
    upload_f32(dlogp_.view(), dlogp_host_);
    if (dent_.defined()) upload_f32(dent_.view(), dent_host_);
  }
  Tensor dout = out_.view();  // (n, V) dL/dlogits, written over the logits below
  if (kind_ == HeadKind::value) {
    dout = dlogp_.view().reshaped({n, 1});  // (n, 1) dL/dvalues
  } else {
    // Only take the entropy kernel when some dL/dentropy is non-zero: with a zero entropy
    // gradient it would give the same numbers, one exp per logit slower.
    bool entropy_grad = entropy_grad_;
    for (float g : dent_host_) entropy_grad = entropy_grad || g != 0.0f;
    if (entropy_grad) {
      be_.dlogits_entropy_inplace(out_.view(), lse_.view(), targets_, dlogp_.view(), ent_.view(),
                                  dent_.view());
    } else {
      be_.dlogits_inplace(out_.view(), lse_.view(), targets_, dlogp_.view());
    }
    if (capped_.defined()) {  // dL/dz = dL/dlogits * (1 - (logits / c)^2)
      be_.softcap_backward(out_.view(), capped_.view(),
                           static_cast<float>(cfg_.final_logit_softcapping));
      capped_.reset();
    }
  }
  // dW (V or 1, d) += dout^T hf; a frozen head (LoRA) has no gradient buffer.
  if (dW.defined()) be_.gemm(dW, dout, true, hf_.view(), false, 1.0f, 1.0f);
  Buffer dhf = pool_.allocate(Category::layer_workspace, DType::F32, {n, d});  // (n, d)
  be_.gemm(dhf.view(), dout, false, W, false, 1.0f, 0.0f);
  out_.reset();
  Buffer dg_scratch;  // frozen final norm: its gradient goes nowhere
  Tensor dg = G.final_norm;
  if (!dg.defined()) {
    dg_scratch = pool_.zeros(Category::layer_workspace, DType::F32, {d});
    dg = dg_scratch.view();
  }
  be_.rmsnorm_backward(gy, dg, dhf.view(), hidden_, W_.final_norm,
                       static_cast<float>(cfg_.rms_norm_eps), cfg_.norm_weight_offset());
}

HeadPassRows::HeadPassRows(Backend& be, Pool& pool, HeadKind kind, bool entropy, int64_t rows)
    : be_(be) {
  if (kind == HeadKind::value) {
    value_ = pool.allocate(Category::other, DType::F32, {rows});  // (rows)
    return;
  }
  logp_ = pool.allocate(Category::other, DType::F32, {rows});                  // (rows)
  if (entropy) entropy_ = pool.allocate(Category::other, DType::F32, {rows});  // (rows)
}

void HeadPassRows::keep(const HeadBlock& b, int64_t at) {
  const int64_t n = b.rows();
  if (value_.defined()) {
    SBP_CHECK(b.kind() == HeadKind::value, "head pass rows: a value pass kept an LM-head block");
    be_.copy(value_.view().slice_rows(at, at + n), b.logits().reshaped({n}));
    return;
  }
  SBP_CHECK(b.kind() == HeadKind::lm && b.has_entropy() == entropy_.defined(),
            "head pass rows: the block does not have the pass's numbers");
  be_.copy(logp_.view().slice_rows(at, at + n), b.logp());
  if (entropy_.defined()) be_.copy(entropy_.view().slice_rows(at, at + n), b.entropy());
}

HeadPassRows::Host HeadPassRows::read(bool at_next_wait) {
  Host h;
  // Read now, the last vector's download is the one wait and the others ride on it.
  auto get = [&](Buffer& v, bool last) -> std::shared_ptr<std::vector<float>> {
    if (!v.defined()) return nullptr;
    std::shared_ptr<std::vector<float>> out;
    if (be_.computes())
      out = at_next_wait || !last ? be_.download_at_next_wait(v.view())
                                  : std::make_shared<std::vector<float>>(download_f32(v.view()));
    v.reset();
    return out;
  };
  h.entropy = get(entropy_, /*last=*/false);
  h.logp = get(logp_, /*last=*/true);
  h.value = get(value_, /*last=*/true);
  return h;
}

TokenChunk HeadPassRows::Host::chunk(int64_t at, int64_t n, int64_t row_begin) const {
  auto rows = [&](const std::shared_ptr<std::vector<float>>& v) -> std::span<const float> {
    if (!v) return {};
    return std::span<const float>(*v).subspan(static_cast<size_t>(at), static_cast<size_t>(n));
  };
  TokenChunk t;
  t.row_begin = row_begin;
  t.logp = rows(logp);
  t.entropy = rows(entropy);
  t.value = rows(value);
  return t;
}

}  // namespace sbp
