#include "engine/prepared_batch.h"

#include <algorithm>

namespace sbp {

namespace {

// Gemma's sliding layers have a rope of their own; Qwen2's rotate with the model's one.
bool has_local_rope(const ModelConfig& cfg) { return cfg.gemma() && cfg.has_sliding_layers(); }

}  // namespace

Buffer upload_table(Pool& pool, const std::vector<int32_t>& v) {
  Buffer b = pool.allocate(Category::other, DType::I32, {static_cast<int64_t>(v.size())});
  upload_i32(b.view(), v);
  return b;
}

std::vector<RopeRows> rope_rows(const ModelConfig& cfg, int64_t P, int64_t prefill) {
  if (cfg.rope_scaling.type != RopeScalingType::dynamic) return {{0, P, cfg.rope_frequencies(P)}};
  if (prefill <= 0) return {{0, P, cfg.rope_frequencies(P)}};
  const int64_t shared = std::min(P, std::max(prefill, cfg.max_position_embeddings));
  std::vector<RopeRows> out = {{0, shared, cfg.rope_frequencies(prefill)}};
  for (int64_t p = shared; p < P; ++p) out.push_back({p, 1, cfg.rope_frequencies(p + 1)});
  return out;
}

PreparedBatch::PreparedBatch(const ModelConfig& cfg, Backend& be, Pool& pool, const Batch& batch,
                             int64_t prefill)
    : be_(&be), pool_(&pool), vocab_(cfg.vocab_size), head_dim_(cfg.head_dim), prefill_(prefill) {
  batch.validate(cfg.vocab_size);
  T_ = batch.size();
  tokens_ = upload_table(pool, batch.tokens);
  targets_ = index_table(be, pool, T_, [&] { return batch.targets(); });
  positions_ = index_table(be, pool, T_, [&] { return batch.positions(); });
  seg_start_ = index_table(be, pool, T_, [&] { return batch.segment_starts(); });
  const int64_t max_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
  max_len_ = max_len;
  rope_ = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
  rope_rows_ = rope_rows(cfg, max_len, prefill);
  for (const RopeRows& r : rope_rows_)
    be.rope_table(rope_.rows(r.first, r.first + r.rows), r.freq.inv_freq,
                  r.freq.attention_factor, r.first);
  if (has_local_rope(cfg)) {
    rope_local_ = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
    local_inv_freq_ = cfg.rope_inv_freq(/*local=*/true);
    be.rope_table(rope_local_.view(), local_inv_freq_);
  }
  tables_ = StepTables{positions_.view(), seg_start_.view(), rope_.view(),
                       rope_local_.defined() ? rope_local_.view() : Tensor()};
}

bool PreparedBatch::serves(const ModelConfig& cfg, const Backend& be, const Pool& pool) const {
  if (&be != be_ || &pool != pool_) return false;
  if (cfg.vocab_size != vocab_ || cfg.head_dim != head_dim_) return false;
  if (rope_rows(cfg, max_len_, prefill_) != rope_rows_) return false;
  if (has_local_rope(cfg) != !local_inv_freq_.empty()) return false;
  return !has_local_rope(cfg) || cfg.rope_inv_freq(/*local=*/true) == local_inv_freq_;
}

}  // namespace sbp
