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

PreparedBatch::PreparedBatch(const ModelConfig& cfg, Backend& be, Pool& pool, const Batch& batch)
    : be_(&be), pool_(&pool), vocab_(cfg.vocab_size), head_dim_(cfg.head_dim) {
  batch.validate(cfg.vocab_size);
  T_ = batch.size();
  tokens_ = upload_table(pool, batch.tokens);
  targets_ = index_table(be, pool, T_, [&] { return batch.targets(); });
  positions_ = index_table(be, pool, T_, [&] { return batch.positions(); });
  seg_start_ = index_table(be, pool, T_, [&] { return batch.segment_starts(); });
  const int64_t max_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
  rope_ = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
  inv_freq_ = cfg.rope_inv_freq();
  be.rope_table(rope_.view(), inv_freq_);
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
  if (cfg.rope_inv_freq() != inv_freq_) return false;
  if (has_local_rope(cfg) != !local_inv_freq_.empty()) return false;
  return !has_local_rope(cfg) || cfg.rope_inv_freq(/*local=*/true) == local_inv_freq_;
}

}  // namespace sbp
