#include "engine/engine.h"

#include <algorithm>

#include "engine/head_block.h"
#include "model/decoder_layer.h"

namespace sbp {

namespace {

Buffer upload_i32(Pool& pool, const std::vector<int32_t>& v) {
  Buffer b = pool.allocate(Category::other, DType::I32, {static_cast<int64_t>(v.size())});
  if (b.view().data) std::copy(v.begin(), v.end(), b.i32());
  return b;
}

// Calls fn(begin, end) for consecutive chunks of `chunk` rows covering [0, T).
template <class Fn>
void for_chunks(int64_t T, int64_t chunk, Fn fn) {
  for (int64_t s = 0; s < T; s += chunk) fn(s, std::min(T, s + chunk));
}

// Same, last chunk first (the order StreamBP's backward needs).
template <class Fn>
void for_chunks_reversed(int64_t T, int64_t chunk, Fn fn) {
  const int64_t count = (T + chunk - 1) / chunk;
  for (int64_t c = count - 1; c >= 0; --c) fn(c * chunk, std::min(T, (c + 1) * chunk));
}

}  // namespace

// Tensors that live for one call: index tables and the rope table.
struct Engine::Step {
  Buffer tokens;     // (T) I32
  Buffer targets;    // (T) I32, -1 = no target
  Buffer positions;  // (T) I32
  Buffer seg_start;  // (T) I32
  Buffer rope;       // (P, h) F32
  StepTables tables;

  Step(const ModelConfig& cfg, Backend& be, Pool& pool, const Batch& batch) {
    batch.validate(cfg.vocab_size);
    tokens = upload_i32(pool, batch.tokens);
    targets = upload_i32(pool, batch.targets());
    const std::vector<int32_t> pos = batch.positions();
    positions = upload_i32(pool, pos);
    seg_start = upload_i32(pool, batch.segment_starts());
    const int64_t max_len = *std::max_element(batch.seq_lens.begin(), batch.seq_lens.end());
    rope = pool.allocate(Category::other, DType::F32, {max_len, cfg.head_dim});
    const std::vector<float> inv_freq = cfg.rope_inv_freq();
    be.rope_table(rope.view(), inv_freq);
    tables = StepTables{positions.view(), seg_start.view(), rope.view()};
  }
};

Engine::Engine(const ModelConfig& cfg, const ParameterSet& weights, Backend& backend, Pool& pool,
               ExecConfig exec)
    : cfg_(cfg), weights_(weights), be_(backend), pool_(pool), exec_(exec) {}

void Engine::forward_backward(const Batch& batch, Objective& objective,
                              const ParameterSet& grads, GradHook* hook) {
  const HeadKind kind = objective.head();
  if (kind == HeadKind::value ? !weights_.views().score.defined()
                              : !weights_.views().lm_head.defined()) {
    throw InputError(kind == HeadKind::value
                         ? "a value objective needs a value model (score.weight)"
                         : "an LM objective needs a model with an LM head");
  }
  const Step step(cfg_, be_, pool_, batch);
  const int64_t T = batch.size(), d = cfg_.hidden_size;
  const int64_t L = cfg_.num_hidden_layers;
  const DType act = exec_.act_dtype;
  const ModelTensors& W = weights_.views();
  const ModelTensors& G = grads.views();
  DecoderLayerOps ops(cfg_, be_, pool_, step.tables, act);
  const int64_t chunk = exec_.layer_chunk_for(T);
  const bool store = exec_.layers == LayerMode::store;
  const bool stream = exec_.layers == LayerMode::stream;

  // ---- forward: keep each layer's input x_l (and, in store mode, everything) ----
  std::vector<Buffer> ckpt(static_cast<size_t>(L + 1));  // x_l (T, d); ckpt[L] = final hidden
  std::vector<LayerKV> kept_kv(store ? static_cast<size_t>(L) : 0);
  std::vector<ChunkActs> kept_acts(store ? static_cast<size_t>(L) : 0);
  ckpt[0] = pool_.allocate(Category::checkpoints, act, {T, d});
  be_.embedding_forward(ckpt[0].view(), step.tokens.view(), W.embed);
  for (int64_t l = 0; l < L; ++l) {
    const LayerTensors& w = W.layers[static_cast<size_t>(l)];
    const Tensor x = ckpt[static_cast<size_t>(l)].view();
    ckpt[static_cast<size_t>(l + 1)] = pool_.allocate(Category::checkpoints, act, {T, d});
    const Tensor y = ckpt[static_cast<size_t>(l + 1)].view();
    if (store) {
      LayerKV& kv = kept_kv[static_cast<size_t>(l)];
      kv = ops.alloc_kv(T, Category::checkpoints, /*keep_k_raw=*/true);
      ops.kv_forward(w, x, 0, kv);
      ops.rows_forward(w, x, 0, kv, y, &kept_acts[static_cast<size_t>(l)], Category::checkpoints);
    } else {
      // recompute: one chunk of T rows; stream: chunk by chunk, first to last, so each chunk's
      // K/V rows exist before its queries need them.
      LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, false);
      for_chunks(T, chunk, [&](int64_t s, int64_t e) {
        ops.kv_forward(w, x.slice_rows(s, e), s, kv);
        ops.rows_forward(w, x.slice_rows(s, e), s, kv, y.slice_rows(s, e), nullptr,
                         Category::layer_workspace);
      });
    }
  }

  // ---- head: one block of rows at a time; gy = dL/d(final hidden) ----
  // A tied LM head writes the embedding's gradient too (grad_hook.h).
  const bool head_writes_embedding = kind == HeadKind::lm && cfg_.tie_word_embeddings;
  Buffer gy = pool_.zeros(Category::grad_buffers, DType::F32, {T, d});  // (T, d)
  if (hook && head_writes_embedding) hook->grads_begin(GradGroup::embedding, -1);
  if (hook) hook->grads_begin(GradGroup::head, -1);
  {
    const Tensor hidden = ckpt[static_cast<size_t>(L)].view();  // (T, d)
    const int64_t hc = exec_.head_chunk_for(T);
    const bool entropy = objective.wants_entropy();
    const bool computes = be_.computes();
    const int passes = objective.prepasses();
    auto block = [&](int64_t s, int64_t e) {
      return HeadBlock(cfg_, be_, pool_, W, act, kind, entropy, hidden.slice_rows(s, e),
                       step.targets.rows(s, e), s);
    };
    // Pre-passes (no grad): every block once per pass, from the kept final hidden state.
    // With a single block the gradient pass below reuses it instead of recomputing it.
    const bool one_block = hc >= T;
    for (int p = 0; p < passes && !one_block; ++p) {
      for_chunks(T, hc, [&](int64_t s, int64_t e) {
        const HeadBlock b = block(s, e);
        if (computes) objective.prepass(p, b.chunk());
      });
      if (computes) objective.finish_prepass(p);
    }
    for_chunks(T, hc, [&](int64_t s, int64_t e) {
      HeadBlock b = block(s, e);
      for (int p = 0; p < passes && one_block; ++p) {
        if (computes) objective.prepass(p, b.chunk());
        if (computes) objective.finish_prepass(p);
      }
      const TokenChunkGrads g = b.alloc_grads();
      if (computes) objective.chunk_grads(b.chunk(), g);
      b.backward(G, gy.rows(s, e));
    });
  }
  if (hook) hook->grads_final(GradGroup::head, -1);
  ckpt[static_cast<size_t>(L)].reset();

  // ---- layers, last to first; gy becomes each layer's input gradient in place ----
  const int64_t Gh = cfg_.num_key_value_heads * cfg_.head_dim;
  for (int64_t l = L - 1; l >= 0; --l) {
    if (hook) hook->grads_begin(GradGroup::layer, l);
    const LayerTensors& w = W.layers[static_cast<size_t>(l)];
    const LayerTensors& gw = G.layers[static_cast<size_t>(l)];
    const Tensor x = ckpt[static_cast<size_t>(l)].view();
    if (store) {
      Buffer dK = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      Buffer dV = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      ops.rows_backward(w, gw, x, 0, kept_acts[static_cast<size_t>(l)],
                        kept_kv[static_cast<size_t>(l)], dK.view(), dV.view(), gy.view());
      kept_acts[static_cast<size_t>(l)] = ChunkActs();
      kept_kv[static_cast<size_t>(l)] = LayerKV();
    } else {
      // K/V phase: computed once per layer (not once per chunk). In recompute mode the raw
      // keys are kept, as autograd would keep them, so no extra product is needed.
      LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, /*keep_k_raw=*/!stream);
      for_chunks(T, chunk, [&](int64_t s, int64_t e) { ops.kv_forward(w, x.slice_rows(s, e), s, kv); });
      Buffer dK = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      Buffer dV = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      for_chunks_reversed(T, chunk, [&](int64_t s, int64_t e) {
        ChunkActs acts;
        ops.rows_forward(w, x.slice_rows(s, e), s, kv, Tensor(), &acts, Category::layer_workspace);
        ops.rows_backward(w, gw, x.slice_rows(s, e), s, acts, kv, dK.view(), dV.view(),
                          gy.rows(s, e));
      });
    }
    ckpt[static_cast<size_t>(l)].reset();
    // Every chunk of layer l is done: its weight gradients are complete for this call.
    if (hook) hook->grads_final(GradGroup::layer, l);
  }
  if (hook && !head_writes_embedding) hook->grads_begin(GradGroup::embedding, -1);
  be_.embedding_backward(G.embed, gy.view(), step.tokens.view());
  if (hook) hook->grads_final(GradGroup::embedding, -1);
}

Buffer Engine::forward_hidden(const Batch& batch, const Step& step) {
  const int64_t T = batch.size(), d = cfg_.hidden_size;
  const DType act = exec_.act_dtype;
  const ModelTensors& W = weights_.views();
  DecoderLayerOps ops(cfg_, be_, pool_, step.tables, act);
  const int64_t chunk = exec_.layer_chunk_for(T);

  Buffer x = pool_.allocate(Category::checkpoints, act, {T, d});  // (T, d) current layer input
  be_.embedding_forward(x.view(), step.tokens.view(), W.embed);
  for (const LayerTensors& w : W.layers) {
    Buffer y = pool_.allocate(Category::checkpoints, act, {T, d});  // (T, d)
    LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, false);
    for_chunks(T, chunk, [&](int64_t s, int64_t e) {
      ops.kv_forward(w, x.rows(s, e), s, kv);
      ops.rows_forward(w, x.rows(s, e), s, kv, y.rows(s, e), nullptr, Category::layer_workspace);
    });
    x = std::move(y);
  }
  return x;
}

Engine::TokenScores Engine::score(const Batch& batch) {
  const Step step(cfg_, be_, pool_, batch);
  const int64_t T = batch.size();
  const Buffer x = forward_hidden(batch, step);  // (T, d)

  TokenScores out;
  out.logp.assign(static_cast<size_t>(T), 0.0f);
  out.argmax.assign(static_cast<size_t>(T), 0);
  const int64_t hc = exec_.head_chunk_for(T);
  for_chunks(T, hc, [&](int64_t s, int64_t e) {
    const int64_t n = e - s;
    const HeadBlock b(cfg_, be_, pool_, weights_.views(), exec_.act_dtype, HeadKind::lm, false,
                      x.rows(s, e), step.targets.rows(s, e), s);
    Buffer best = pool_.allocate(Category::other, DType::I32, {n});
    be_.argmax_rows(best.view(), b.logits());
    if (be_.computes()) {
      const TokenChunk c = b.chunk();
      std::copy(c.logp.begin(), c.logp.end(), out.logp.begin() + s);
      std::copy(best.i32(), best.i32() + n, out.argmax.begin() + s);
    }
  });
  return out;
}

std::vector<float> Engine::values(const Batch& batch) {
  const Step step(cfg_, be_, pool_, batch);
  const int64_t T = batch.size();
  const Buffer x = forward_hidden(batch, step);  // (T, d)
  std::vector<float> out(static_cast<size_t>(T), 0.0f);
  for_chunks(T, exec_.head_chunk_for(T), [&](int64_t s, int64_t e) {
    const HeadBlock b(cfg_, be_, pool_, weights_.views(), exec_.act_dtype, HeadKind::value,
                      false, x.rows(s, e), step.targets.rows(s, e), s);
    if (be_.computes()) {
      const TokenChunk c = b.chunk();
      std::copy(c.value.begin(), c.value.end(), out.begin() + s);
    }
  });
  return out;
}

}  // namespace sbp
