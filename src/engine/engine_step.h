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
    tokens = upload_table(pool, batch.tokens);
    targets = upload_table(pool, batch.targets());
    const std::vector<int32_t> pos = batch.positions();
    positions = upload_table(pool, pos);
    seg_start = upload_table(pool, batch.segment_starts());
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
