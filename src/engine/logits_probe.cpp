#include "engine/logits_probe.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/decoder_layer.h"

namespace sbp {

namespace {

Buffer upload_i32(Pool& pool, const std::vector<int32_t>& v) {
  Buffer b = pool.allocate(Category::other, DType::I32, {static_cast<int64_t>(v.size())});
  if (b.view().data) std::copy(v.begin(), v.end(), b.i32());
  return b;
}

}  // namespace

std::vector<float> probe_logits(const ModelConfig& cfg, const ParameterSet& weights,
                                Backend& be, Pool& pool, const Batch& batch,
                                const ExecConfig& exec, std::span<const int64_t> rows) {
  batch.validate(cfg.vocab_size, "probe_logits");
  const int64_t T = batch.size(), d = cfg.hidden_size, V = cfg.vocab_size;
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) {
    if (r < 0 || r >= T)
      throw InputError("probe_logits: row " + std::to_string(r) + " outside the batch (T = " +
                       std::to_string(T) + ")");
  }
  const DType act = exec.act_dtype;
  const ModelTensors& W = weights.views();

  // Per-call tables, built exactly as the engine builds them (positions restart per segment,
  // the rope table covers the longest segment).
  const Buffer tokens = upload_i32(pool, batch.tokens);              // (T)
  const Buffer positions = upload_i32(pool, batch.positions());      // (T)
  const Buffer seg_start = upload_i32(pool, batch.segment_starts()); // (T)
  const int64_t max_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
  const Buffer rope = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
  be.rope_table(rope.view(), cfg.rope_inv_freq());  // (P, h) [cos | sin]
  const StepTables tables{positions.view(), seg_start.view(), rope.view()};
  DecoderLayerOps ops(cfg, be, pool, tables, act);
  const int64_t chunk = exec.layer_chunk_for(T);

  Buffer x = pool.allocate(Category::checkpoints, act, {T, d});  // (T, d) current layer input
  be.embedding_forward(x.view(), tokens.view(), W.embed);
  for (const LayerTensors& w : W.layers) {
    Buffer y = pool.allocate(Category::checkpoints, act, {T, d});  // (T, d) layer output
    LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, false);
    // First chunk to last, so each chunk's K/V rows exist before its queries read them.
    for (int64_t s = 0; s < T; s += chunk) {
      const int64_t e = std::min(T, s + chunk);
      ops.kv_forward(w, x.rows(s, e), s, kv);
      ops.rows_forward(w, x.rows(s, e), s, kv, y.rows(s, e), nullptr, Category::layer_workspace);
    }
    x = std::move(y);
  }

  std::vector<float> out(static_cast<size_t>(n * V), 0.0f);
  if (n == 0) return out;
  // Gather the requested rows (they need not be contiguous), then final norm and LM head.
  Buffer picked = pool.allocate(Category::layer_workspace, act, {n, d});  // (n, d)
  for (int64_t i = 0; i < n; ++i) be.copy(picked.rows(i, i + 1), x.rows(rows[i], rows[i] + 1));
  x.reset();
  Buffer hf = pool.allocate(Category::layer_workspace, act, {n, d});  // (n, d)
  be.rmsnorm_forward(hf.view(), picked.view(), W.final_norm, static_cast<float>(cfg.rms_norm_eps));
  Buffer logits = pool.allocate(Category::logits, DType::F32, {n, V});  // (n, V)
  be.gemm(logits.view(), hf.view(), false, W.lm_head, true, 1.0f, 0.0f);
  if (be.computes()) std::copy(logits.f32(), logits.f32() + n * V, out.begin());
  return out;
}

}  // namespace sbp
