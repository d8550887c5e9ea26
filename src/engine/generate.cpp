// Engine::generate: one completion with a KV cache, through the training step's own layer and
// head code (engine.h explains the memory and the reproducibility).
#include <algorithm>

#include "core/checked_math.h"
#include "engine/engine.h"
#include "engine/engine_step.h"
#include "engine/head_block.h"
#include "model/decoder_layer.h"

namespace sbp {

const char* finish_reason_name(FinishReason r) {
  return r == FinishReason::stop ? "stop" : "length";
}

Generated Engine::generate(std::span<const int32_t> prompt, const GenerationConfig& g, Rng& rng) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  if (P == 0) throw InputError("generate: the prompt is empty");
  if (g.max_new_tokens < 1) throw InputError("generate: max_new_tokens must be at least 1");
  g.sampling.validate("generate");
  const int64_t T = checked_add(P, g.max_new_tokens, "generate: prompt + max_new_tokens");
  if (T > cfg_.max_position_embeddings)
    throw InputError("generate: prompt (" + std::to_string(P) + " tokens) + max_new_tokens (" +
                     std::to_string(g.max_new_tokens) + ") exceeds max_position_embeddings (" +
                     std::to_string(cfg_.max_position_embeddings) + ")");
  for (int64_t i = 0; i < P; ++i)
    if (prompt[i] < 0 || prompt[i] >= cfg_.vocab_size)
      throw InputError("generate: prompt token " + std::to_string(i) + " (" +
                       std::to_string(prompt[i]) + ") is outside the vocabulary [0, " +
                       std::to_string(cfg_.vocab_size) + ")");
  SBP_CHECK(weights_.views().lm_head.defined(), "generate: the model has no LM head");

  // The tables of one T-row sequence (positions 0..T-1, one segment): the cache's rows are the
  // sequence's rows, so every layer call is the training step's call on a row range.
  Batch whole;
  whole.tokens.assign(static_cast<size_t>(T), 0);
  std::copy(prompt.begin(), prompt.end(), whole.tokens.begin());
  whole.seq_lens = {T};
  const Step step(cfg_, be_, pool_, whole);
  const int64_t d = cfg_.hidden_size, V = cfg_.vocab_size;
  const DType act = exec_.act_dtype;
  // One set of ops per layer: a layer's ops know its attention kind (Gemma: sliding or full).
  std::vector<DecoderLayerOps> ops;
  std::vector<LayerKV> cache;
  ops.reserve(weights_.views().layers.size());
  for (size_t l = 0; l < weights_.views().layers.size(); ++l) {
    ops.emplace_back(cfg_, be_, pool_, step.tables, act, static_cast<int64_t>(l));
    bind_lora(ops.back(), l);
    cache.push_back(ops.back().alloc_kv(T, Category::kv_cache, false));
  }
  const Buffer no_target = upload_table(pool_, {-1});

  // Rows [s, e) through every layer, their ids already in step.tokens; returns the (1, V)
  // logits of row e - 1. A prompt longer than the stream chunk goes chunk by chunk.
  const auto forward_rows = [&](int64_t s, int64_t e) {
    const int64_t chunk = std::max<int64_t>(1, exec_.layer_chunk_for(e - s));
    Buffer last = pool_.allocate(Category::layer_workspace, act, {1, d});  // (1, d)
    for (int64_t cs = s; cs < e; cs += chunk) {
      const int64_t ce = std::min(e, cs + chunk);
      Buffer x = pool_.allocate(Category::layer_workspace, act, {ce - cs, d});  // (n, d)
      embed(x.view(), step.tokens.rows(cs, ce));
      for (size_t l = 0; l < cache.size(); ++l) {
        const LayerTensors& w = weights_.views().layers[l];
        Buffer y = pool_.allocate(Category::layer_workspace, act, {ce - cs, d});  // (n, d)
        ops[l].kv_forward(w, x.view(), cs, cache[l]);
        ops[l].rows_forward(w, x.view(), cs, cache[l], y.view(), nullptr,
                            Category::layer_workspace);
        x = std::move(y);
      }
      if (ce == e) be_.copy(last.view(), x.rows(ce - cs - 1, ce - cs));
    }
    const HeadBlock head(cfg_, be_, pool_, weights_.views(), act, HeadKind::lm, false, last.view(),
                         no_target.view(), e - 1);
    return download_f32(head.logits());  // (V)
  };

  Generated out;
  std::vector<float> logits = forward_rows(0, P);
  for (int64_t t = P;; ++t) {
    if (!be_.computes()) break;  // the planner sizes the cache and one step; it draws nothing
    SBP_CHECK(static_cast<int64_t>(logits.size()) == V, "generate: logits row of the wrong size");
    const int32_t id = choose_token(logits, g.sampling, rng);
    out.ids.push_back(id);
    out.logprobs.push_back(static_cast<float>(token_logprob(logits, id)));
    if (std::find(g.stop_ids.begin(), g.stop_ids.end(), id) != g.stop_ids.end() ||
        (g.stop_after && g.stop_after(out.ids))) {
      out.finish = FinishReason::stop;
      break;
    }
    if (t + 1 == T) {
      out.finish = FinishReason::length;
      break;
    }
    // The new token becomes row t: its id into the table, then one row through the model.
    upload_i32(step.tokens.rows(t, t + 1), std::vector<int32_t>{id});
    logits = forward_rows(t, t + 1);
  }
  return out;
}

}  // namespace sbp
