#pragma once
// The engine's per-call tables (Engine::Step), shared by the training step (engine.cpp) and
// generation (generate.cpp), so that both run the model on the very same index and rope tables.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/batch.h"
#include "core/pool.h"
#include "engine/engine.h"
#include "model/decoder_layer.h"

namespace sbp {

// A (n) I32 index table in the backend's memory.
inline Buffer upload_table(Pool& pool, const std::vector<int32_t>& v) {
  Buffer b = pool.allocate(Category::other, DType::I32, {static_cast<int64_t>(v.size())});
  upload_i32(b.view(), v);
  return b;
}

// Same, with its values made by `values()` only where the backend computes: a shape-only
// backend never reads them, and at the lengths `plan` is asked about (10^8 tokens and more)
// building three T-sized host tables that are thrown away was most of the planner's memory.
template <class Values>
Buffer index_table(const Backend& be, Pool& pool, int64_t n, Values values) {
  Buffer b = pool.allocate(Category::other, DType::I32, {n});
  if (be.computes()) upload_i32(b.view(), values());
  return b;
}

// Tensors that live for one call: index tables and the rope table.
struct Engine::Step {
  Buffer tokens;     // (T) I32
  Buffer targets;    // (T) I32, -1 = no target
  Buffer positions;  // (T) I32
  Buffer seg_start;  // (T) I32
  Buffer rope;       // (P, h) F32
  Buffer rope_local;  // (P, h) F32, Gemma's sliding layers only
  StepTables tables;

  Step(const ModelConfig& cfg, Backend& be, Pool& pool, const Batch& batch) {
    batch.validate(cfg.vocab_size);
    const int64_t T = batch.size();
    tokens = upload_table(pool, batch.tokens);
    targets = index_table(be, pool, T, [&] { return batch.targets(); });
    positions = index_table(be, pool, T, [&] { return batch.positions(); });
    seg_start = index_table(be, pool, T, [&] { return batch.segment_starts(); });
    const int64_t max_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
    rope = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
    const std::vector<float> inv_freq = cfg.rope_inv_freq();
    be.rope_table(rope.view(), inv_freq);
    // Gemma's sliding layers have a rope of their own; Qwen2's rotate with the model's one.
    if (cfg.gemma() && cfg.has_sliding_layers()) {
      rope_local = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
      const std::vector<float> local_inv_freq = cfg.rope_inv_freq(/*local=*/true);
      be.rope_table(rope_local.view(), local_inv_freq);
    }
    tables = StepTables{positions.view(), seg_start.view(), rope.view(),
                        rope_local.defined() ? rope_local.view() : Tensor()};
  }
};

}  // namespace sbp
