#include "engine/engine.h"

#include <algorithm>
#include <memory>
#include <variant>

#include "engine/chunk_loops.h"
#include "engine/context_rows.h"
#include "engine/head_routes.h"
#include "engine/residual_grad.h"
#include "engine/window_stream.h"
#include "model/decoder_layer.h"

namespace sbp {

namespace {

// The embedding multiplier in the activation dtype (ModelConfig::embed_scale).
float embed_scale_in(const ModelConfig& cfg, DType act) {
  return cfg.embed_scale(act == DType::BF16);
}

}  // namespace

struct Engine::Kept {
  // (T, d) x_l of every layer l < L: on the device (inputs[l]), or, offloaded, in host memory
  // (host_inputs[l]) until the backward prefetches it back into inputs[l].
  std::vector<Buffer> inputs;
  std::vector<Buffer> host_inputs;
  std::vector<LayerKV> kv;      // store mode: every layer's K/V
  std::vector<ChunkActs> acts;  // store mode: every layer's activations (one chunk of T rows)
};

Engine::Engine(const ModelConfig& cfg, const ParameterSet& weights, Backend& backend, Pool& pool,
               ExecConfig exec)
    : cfg_(cfg), weights_(weights), be_(backend), pool_(pool), exec_(exec) {}

const PreparedBatch& Engine::checked(const PreparedBatch& batch) const {
  SBP_CHECK(batch.serves(cfg_, be_, pool_),
            "Engine: the prepared batch was built for another model config (vocabulary, head dim "
            "or rope), backend or pool");
  return batch;
}

void Engine::check_head(const Objective& objective) const {
  const HeadKind kind = objective.head();
  // With a weight hook (ZeRO-3) no tensor is bound between passes; the model set built the
  // weights with the head its objective drives.
  if (weight_hook_) return;
  if (kind == HeadKind::value ? !weights_.views().score.defined()
                              : !weights_.views().lm_head.defined()) {
    throw InputError(kind == HeadKind::value
                         ? "a value objective needs a value model (score.weight)"
                         : "an LM objective needs a model with an LM head");
  }
}

void Engine::forward_backward(const Batch& batch, Objective& objective, const ParameterSet& grads,
                              GradHook* hook, DeferredReads* later) {
  check_head(objective);  // before the tables, as a call with a prepared batch checks it first
  forward_backward(PreparedBatch(cfg_, be_, pool_, batch), objective, grads, hook, later);
}

void Engine::forward_backward(const PreparedBatch& batch, Objective& objective,
                              const ParameterSet& grads, GradHook* hook, DeferredReads* later) {
  check_head(objective);
  const PreparedBatch& step = checked(batch);
  const Backend::ScratchLoan loan(be_, pool_);  // GEMM conversion scratch in this ledger
  const HeadKind kind = objective.head();
  const ContextSlice cs = slice(step.size());  // this rank's rows (all of them without a group)
  const int64_t Tl = cs.local_rows(), d = cfg_.hidden_size;
  // A tied LM head writes the embedding's gradient too (grad_hook.h).
  const bool head_writes_embedding = kind == HeadKind::lm && cfg_.tie_word_embeddings;

  // Forward: every layer's input x_l stays (and, in store mode, everything).
  Kept kept;
  Buffer hidden = forward_layers(step, &kept);  // (Tl, d) final hidden, before the norm
  // (Tl, d) dL/d(hidden), on the device or waiting in host memory (Offload::residual_grad).
  ResidualGrad gy(be_, pool_, exec_.offload.residual_grad ? offload_pool() : nullptr, Tl, d);
  if (hook && head_writes_embedding) hook->grads_begin(GradGroup::embedding, -1);
  if (hook) hook->grads_begin(GradGroup::head, -1);
  acquire(GradGroup::head, -1);  // prefetched by the forward's last layer
  prefetch(GradGroup::layer, cfg_.num_hidden_layers - 1);
  head_backward(step, hidden.view(), objective, grads.views(), gy, later);
  release(GradGroup::head, -1);
  if (hook) hook->grads_final(GradGroup::head, -1);
  hidden.reset();
  // Layers last to first; gy becomes each layer's input gradient in place.
  layers_backward(step, kept, grads.views(), gy, hook);
  if (hook && !head_writes_embedding) hook->grads_begin(GradGroup::embedding, -1);
  // x0 = embed[tokens] * s (Gemma), so d(embed row) = s * dL/dx0.
  const float es = embed_scale_in(cfg_, exec_.act_dtype);
  // The padding row's lookups add nothing, as in transformers (nn.Embedding's padding_idx).
  // Offloaded, gy comes back a layer chunk of rows at a time; else each piece in one call.
  const int64_t rows = gy.offloaded() ? exec_.layer_chunk_for(step.size()) : step.size();
  for_piece_chunks(cs, rows, be_, [&](const RowPiece& p, int64_t s, int64_t e) {
    const Tensor g = gy.open(p.local + s, p.local + e);
    if (es != 1.0f) be_.scale_inplace(g, es);
    if (grads.views().embed.defined())  // frozen (LoRA): no gradient
      be_.embedding_backward(grads.views().embed, g,
                             step.tokens().slice_rows(p.begin + s, p.begin + e),
                             cfg_.padding_row());
    gy.close();
  });
  gy.finish();
  if (hook) hook->grads_final(GradGroup::embedding, -1);
}

void Engine::head_backward(const PreparedBatch& step, const Tensor& hidden, Objective& objective,
                           const ModelTensors& G, ResidualGrad& gy, DeferredReads* later) {
  const ContextSlice cs = slice(step.size());  // hidden and gy hold this rank's rows (local rows)
  const HeadPass pass{.cfg = cfg_,
                      .be = be_,
                      .pool = pool_,
                      .W = weights_.views(),
                      .act = exec_.act_dtype,
                      .step = step,
                      .hidden = hidden,
                      .cs = cs,
                      .hc = exec_.head_chunk_for(step.size()),
                      .group = context_,
                      .G = G,
                      .gy = gy,
                      .later = later,
                      .objective = objective};
  std::visit([&](const auto& route) { run_head_route(pass, route); }, objective.route());
}

void Engine::layers_backward(const PreparedBatch& step, Kept& kept, const ModelTensors& G,
                             ResidualGrad& gy, GradHook* hook) {
  const int64_t T = step.size(), L = cfg_.num_hidden_layers;
  const ContextSlice cs = slice(T);  // gy and the checkpoints hold this rank's rows
  const int64_t Gh = cfg_.num_key_value_heads * cfg_.head_dim;
  const int64_t chunk = exec_.layer_chunk_for(T);
  const bool store = exec_.layers == LayerMode::store;
  const bool stream = exec_.layers == LayerMode::stream;
  Buffer arriving;  // (T, d) x_{l-1} on its way back from the host while layer l runs
  Backend::CopyTicket arriving_copy = 0;
  for (int64_t l = L - 1; l >= 0; --l) {
    const size_t li = static_cast<size_t>(l);
    if (!kept.inputs[li].defined()) {  // offloaded: prefetched during layer l + 1
      be_.wait_copy(arriving_copy);
      kept.inputs[li] = std::move(arriving);
      kept.host_inputs[li].reset();
    }
    if (l > 0 && kept.host_inputs[li - 1].defined()) {
      const Tensor& from = kept.host_inputs[li - 1].view();
      arriving = pool_.allocate(Category::checkpoints, from.dtype, from.shape);
      arriving_copy = be_.prefetch_async(arriving.view(), from);
    }
    DecoderLayerOps ops(cfg_, be_, pool_, step.tables(), exec_.act_dtype, l);
    bind_lora(ops, li);
    if (hook) hook->grads_begin(GradGroup::layer, l);
    acquire(GradGroup::layer, l);  // for the recompute and the backward
    if (l > 0) prefetch(GradGroup::layer, l - 1);
    const LayerTensors& w = weights_.views().layers[li];
    const LayerTensors& gw = G.layers[li];
    const Tensor x = kept.inputs[li].view();  // (Tl, d) this rank's rows
    if (store) {
      Buffer dK = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      Buffer dV = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      ops.rows_backward(w, gw, x, 0, kept.acts[li], kept.kv[li], dK.view(), dV.view(),
                        gy.open(0, gy.rows()));
      gy.close();
      kept.acts[li] = ChunkActs();
      kept.kv[li] = LayerKV();
    } else if (cs.split()) {
      // Context parallelism: K/V of every rank's rows; this rank's queries add into every key
      // row's dK/dV; once the group has summed them onto the rows' owners, each rank finishes
      // the K/V part of its own rows' backward.
      LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, /*keep_k_raw=*/!stream);
      context_kv(ops, w, cs, x, chunk, kv, nullptr);
      Buffer dK = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      Buffer dV = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      // A piece's chunks, last first: attention adds into every key row's dK/dV; the K/V part
      // of the piece's own rows is left for kv_backward.
      auto attend_back = [&](const RowPiece& p) {
        for_chunks_reversed(ChunkRange(p.size(), chunk, be_), [&](int64_t s, int64_t e) {
          const int64_t a = p.local + s, b = p.local + e;  // local rows of global p.begin + s ..
          ChunkActs acts;
          ops.rows_forward(w, x.slice_rows(a, b), p.begin + s, kv, Tensor(), &acts,
                           Category::layer_workspace);
          ops.rows_backward(w, gw, x.slice_rows(a, b), p.begin + s, acts, kv, dK.view(), dV.view(),
                            gy.open(a, b), /*finish_kv=*/false);
          gy.close();
        });
      };
      auto finish_kv = [&](const RowPiece& p) {
        for_chunks(ChunkRange(p.size(), chunk, be_), [&](int64_t s, int64_t e) {
          const int64_t a = p.local + s, b = p.local + e;
          ops.kv_backward(w, gw, x.slice_rows(a, b), p.begin + s, kv, dK.view(), dV.view(),
                          gy.open(a, b));
          gy.close();
        });
      };
      // The rank's late piece (second half of the rows) first. Then the second half's key rows
      // are final on every rank (a first-half query attends to no later key), so their sums
      // travel while the early piece computes; the first half's travel while the late piece's
      // K/V backward runs.
      const RowPiece& early = cs.mine()[0];
      const RowPiece& late = cs.mine()[1];
      const size_t half = cs.pieces().size() / 2;
      const Tensor sums[] = {dK.view(), dV.view()};
      RowCollectives second_half(*context_), first_half(*context_);
      attend_back(late);
      second_half.reduce_to_owners(cs, sums, half, 2 * half);
      attend_back(early);
      first_half.reduce_to_owners(cs, sums, 0, half);
      second_half.wait();
      finish_kv(late);
      first_half.wait();
      finish_kv(early);
    } else if (stream && window_stream_applies(cfg_, l, T, chunk)) {
      // A sliding layer holds K/V and dK/dV of its window plus one chunk (window_stream.h).
      window_layer_backward(ops, be_, pool_, w, gw, x, gy.open(0, gy.rows()), cfg_.layer_window(l),
                            chunk);
      gy.close();
    } else {
      // K/V phase: computed once per layer (not once per chunk). In recompute mode the raw
      // keys are kept, as autograd would keep them, so no extra product is needed.
      LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, /*keep_k_raw=*/!stream);
      for_chunks(ChunkRange(T, chunk, be_),
                 [&](int64_t s, int64_t e) { ops.kv_forward(w, x.slice_rows(s, e), s, kv); });
      Buffer dK = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      Buffer dV = pool_.zeros(Category::layer_workspace, DType::F32, {T, Gh});  // (T, G*h)
      for_chunks_reversed(ChunkRange(T, chunk, be_), [&](int64_t s, int64_t e) {
        ChunkActs acts;
        ops.rows_forward(w, x.slice_rows(s, e), s, kv, Tensor(), &acts, Category::layer_workspace);
        ops.rows_backward(w, gw, x.slice_rows(s, e), s, acts, kv, dK.view(), dV.view(),
                          gy.open(s, e));
        gy.close();
      });
    }
    kept.inputs[li].reset();
    release(GradGroup::layer, l);
    // Every chunk of layer l is done: its weight gradients are complete for this call.
    if (hook) hook->grads_final(GradGroup::layer, l);
  }
}

Pool* Engine::offload_pool() const {
  if (!exec_.offload.activations()) return nullptr;
  if (!pool_.host())
    throw InputError("offload: the step's memory has no host pool (Pool::set_host)");
  return pool_.host();
}

void Engine::check_context() const {
  if (exec_.layers == LayerMode::store)
    throw InputError(
        "context parallelism runs the stream and checkpoint modes, not base (store): its step "
        "keeps every activation of the whole sequence");
}

void Engine::context_kv(DecoderLayerOps& ops, const LayerTensors& w, const ContextSlice& cs,
                        const Tensor& x, int64_t chunk, LayerKV& kv, RowCollectives* second_half) {
  SBP_CHECK(cs.mine().size() == 2 && cs.pieces().size() % 2 == 0,
            "context_kv: a rank of a context group owns two pieces");
  for_piece_chunks(cs, chunk, be_, [&](const RowPiece& p, int64_t s, int64_t e) {
    ops.kv_forward(w, x.slice_rows(p.local + s, p.local + e), p.begin + s, kv);
  });
  std::vector<Tensor> rows{kv.k.view(), kv.v.view()};
  if (kv.k_raw.defined()) rows.push_back(kv.k_raw.view());
  const size_t half = cs.pieces().size() / 2;
  RowCollectives first_half(*context_), all_of_the_rest(*context_);
  first_half.gather(cs, rows, 0, half);
  (second_half ? *second_half : all_of_the_rest).gather(cs, rows, half, 2 * half);
  first_half.wait();
  all_of_the_rest.wait();
}

void Engine::bind_lora(DecoderLayerOps& ops, size_t l) const {
  if (!lora_w_) return;
  ops.set_lora(&lora_w_->layers()[l], lora_g_ ? &lora_g_->layers()[l] : nullptr, lora_w_->scale());
}

void Engine::embed(const Tensor& x, const Tensor& ids) {
  be_.embedding_forward(x, ids, weights_.views().embed);
  // Gemma multiplies the embeddings by sqrt(d), rounded to the activation dtype (1 elsewhere).
  const float es = embed_scale_in(cfg_, exec_.act_dtype);
  if (es != 1.0f) be_.scale_inplace(x, es);
}

Buffer Engine::forward_layers(const PreparedBatch& step, Kept* kept, bool whole) {
  const int64_t T = step.size(), d = cfg_.hidden_size;
  const ContextSlice cs = whole ? ContextSlice(T, 1, 0) : slice(T);
  if (cs.split()) check_context();
  const int64_t Tl = cs.local_rows();
  const DType act = exec_.act_dtype;
  const ModelTensors& W = weights_.views();
  const int64_t chunk = exec_.layer_chunk_for(T);
  const bool store = kept != nullptr && exec_.layers == LayerMode::store;

  const size_t L = W.layers.size();
  Pool* host = exec_.offload.checkpoints ? offload_pool() : nullptr;
  if (kept) {
    kept->inputs.resize(L);
    kept->host_inputs.resize(L);
  }
  // Offload: x_l's copy to the host runs while layer l + 1 computes; its device bytes are
  // released once that copy is waited for, after layer l + 1.
  Buffer leaving;  // (T, d) the device x_l whose copy is in flight
  Backend::CopyTicket leaving_copy = 0;

  Buffer x =
      pool_.allocate(Category::checkpoints, act, {Tl, d});  // (Tl, d) x_0 of this rank's rows
  if (L > 0) prefetch(GradGroup::layer, 0);  // travels while the embedding is gathered and read
  acquire(GradGroup::embedding, -1);
  for (const RowPiece& p : cs.mine())
    embed(x.rows(p.local, p.local + p.size()), step.tokens().slice_rows(p.begin, p.end));
  release(GradGroup::embedding, -1);
  for (size_t li = 0; li < L; ++li) {
    acquire(GradGroup::layer, static_cast<int64_t>(li));
    // Every caller runs the head after the last layer.
    if (li + 1 < L)
      prefetch(GradGroup::layer, static_cast<int64_t>(li + 1));
    else
      prefetch(GradGroup::head, -1);
    const LayerTensors& w = W.layers[li];
    DecoderLayerOps ops(cfg_, be_, pool_, step.tables(), act, static_cast<int64_t>(li));
    bind_lora(ops, li);
    Buffer y = pool_.allocate(Category::checkpoints, act, {Tl, d});  // (Tl, d) layer output
    if (store) {
      // Every activation stays for the backward, as plain backprop keeps it.
      kept->kv.push_back(ops.alloc_kv(T, Category::checkpoints, /*keep_k_raw=*/true));
      kept->acts.emplace_back();
      ops.kv_forward(w, x.view(), 0, kept->kv.back());
      ops.rows_forward(w, x.view(), 0, kept->kv.back(), y.view(), &kept->acts.back(),
                       Category::checkpoints);
    } else if (cs.split()) {
      // Context parallelism: this rank's K/V rows, every rank's (gathered), then this rank's
      // query rows against all of them.
      LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, false);
      auto attend = [&](const RowPiece& p) {
        for_chunks(ChunkRange(p.size(), chunk, be_), [&](int64_t s, int64_t e) {
          const int64_t a = p.local + s, b = p.local + e;
          ops.rows_forward(w, x.rows(a, b), p.begin + s, kv, y.rows(a, b), nullptr,
                           Category::layer_workspace);
        });
      };
      // The early piece's queries need only the first half's keys: they run while the second
      // half's K/V rows are still on their way.
      RowCollectives second_half(*context_);
      context_kv(ops, w, cs, x.view(), chunk, kv, &second_half);
      attend(cs.mine()[0]);
      second_half.wait();
      attend(cs.mine()[1]);
    } else if (exec_.layers == LayerMode::stream &&
               window_stream_applies(cfg_, static_cast<int64_t>(li), T, chunk)) {
      // A sliding layer holds the K/V of its window plus one chunk (window_stream.h).
      window_layer_forward(ops, be_, w, x.view(), y.view(),
                           cfg_.layer_window(static_cast<int64_t>(li)), chunk);
    } else {
      // recompute and scoring: one chunk of T rows; stream: chunk by chunk, first to last, so
      // each chunk's K/V rows exist before its queries need them.
      LayerKV kv = ops.alloc_kv(T, Category::layer_workspace, false);
      for_chunks(ChunkRange(T, chunk, be_), [&](int64_t s, int64_t e) {
        ops.kv_forward(w, x.rows(s, e), s, kv);
        ops.rows_forward(w, x.rows(s, e), s, kv, y.rows(s, e), nullptr, Category::layer_workspace);
      });
    }
    if (leaving.defined()) {
      be_.wait_copy(leaving_copy);
      leaving.reset();
    }
    if (kept && host && li + 1 < L) {  // the last layer's input stays: the backward starts there
      kept->host_inputs[li] = host->allocate(Category::checkpoints, act, {Tl, d});
      leaving_copy = be_.offload_async(kept->host_inputs[li].view(), x.view());
      leaving = std::move(x);
    } else if (kept) {
      kept->inputs[li] = std::move(x);
    }
    release(GradGroup::layer, static_cast<int64_t>(li));
    x = std::move(y);
  }
  return x;
}

Engine::TokenScores Engine::score(const Batch& batch) {
  return score(PreparedBatch(cfg_, be_, pool_, batch));
}

Engine::TokenScores Engine::score(const PreparedBatch& batch) {
  const PreparedBatch& step = checked(batch);
  const Backend::ScratchLoan loan(be_, pool_);  // GEMM conversion scratch in this ledger
  const int64_t T = step.size();
  const ContextSlice cs = slice(T);
  const Buffer x = forward_layers(step, nullptr);  // (Tl, d) this rank's rows

  TokenScores out;
  out.logp.assign(static_cast<size_t>(T), 0.0f);
  out.argmax.assign(static_cast<size_t>(T), 0);
  // The blocks leave their numbers on the device, in this rank's rows of two (Tl) vectors that
  // the host reads once at the end: one wait for the device per call, not two per head block.
  Buffer logp = pool_.allocate(Category::other, DType::F32, {cs.local_rows()});  // (Tl)
  Buffer best = pool_.allocate(Category::other, DType::I32, {cs.local_rows()});  // (Tl)
  acquire(GradGroup::head, -1);
  head_rows(step, cs, x.view(), HeadKind::lm, logp.view(), best.view());
  release(GradGroup::head, -1);
  if (be_.computes()) {
    const auto lp = be_.download_at_next_wait(logp.view());  // comes with the argmax's wait
    const std::vector<int32_t> am = download_i32(best.view());
    place_local_rows<float>(cs, *lp, out.logp);
    place_local_rows<int32_t>(cs, am, out.argmax);
  }
  if (cs.split() && be_.computes()) {  // every row on every rank
    gather_host_rows(*context_, cs, std::span<float>(out.logp));
    gather_host_rows(*context_, cs, std::span<int32_t>(out.argmax));
  }
  return out;
}

Buffer Engine::rows_on_device(const PreparedBatch& batch, HeadKind kind) {
  const PreparedBatch& step = checked(batch);
  const Backend::ScratchLoan loan(be_, pool_);  // GEMM conversion scratch in this ledger
  const int64_t T = step.size();
  const ContextSlice cs = slice(T);
  SBP_CHECK(!cs.split(), "rows_on_device: a context group's ranks each hold only their rows");
  const Buffer x = forward_layers(step, nullptr);                  // (T, d)
  Buffer rows = pool_.allocate(Category::other, DType::F32, {T});  // (T)
  acquire(GradGroup::head, -1);
  head_rows(step, cs, x.view(), kind, rows.view(), Tensor());
  release(GradGroup::head, -1);
  return rows;
}

void Engine::head_rows(const PreparedBatch& step, const ContextSlice& cs, const Tensor& x,
                       HeadKind kind, const Tensor& rows, const Tensor& best) {
  const int64_t hc = exec_.head_chunk_for(step.size());
  for_piece_chunks(cs, hc, be_, [&](const RowPiece& p, int64_t s, int64_t e) {
    const int64_t at = p.begin + s, a = p.local + s, b = p.local + e;
    const HeadBlock block(cfg_, be_, pool_, weights_.views(), exec_.act_dtype, kind, false,
                          x.slice_rows(a, b), step.targets().slice_rows(at, p.begin + e), at,
                          /*to_host=*/false);
    if (kind == HeadKind::value) {
      be_.copy(rows.slice_rows(a, b), block.logits().reshaped({b - a}));
      return;
    }
    be_.copy(rows.slice_rows(a, b), block.logp());
    if (best.defined()) be_.argmax_rows(best.slice_rows(a, b), block.logits());
  });
}

std::vector<float> Engine::values(const Batch& batch) {
  return values(PreparedBatch(cfg_, be_, pool_, batch));
}

std::vector<float> Engine::values(const PreparedBatch& batch) {
  const PreparedBatch& step = checked(batch);
  const Backend::ScratchLoan loan(be_, pool_);  // GEMM conversion scratch in this ledger
  const int64_t T = step.size();
  const ContextSlice cs = slice(T);
  const Buffer x = forward_layers(step, nullptr);  // (Tl, d) this rank's rows
  std::vector<float> out(static_cast<size_t>(T), 0.0f);
  // As score(): the blocks' values gathered on the device, read once.
  const Buffer values = pool_.allocate(Category::other, DType::F32, {cs.local_rows()});  // (Tl)
  acquire(GradGroup::head, -1);
  head_rows(step, cs, x.view(), HeadKind::value, values.view(), Tensor());
  release(GradGroup::head, -1);
  if (be_.computes()) place_local_rows<float>(cs, download_f32(values.view()), out);
  if (cs.split() && be_.computes()) gather_host_rows(*context_, cs, std::span<float>(out));
  return out;
}

std::vector<float> Engine::logits_at(const Batch& batch, std::span<const int64_t> rows) {
  return logits_at(PreparedBatch(cfg_, be_, pool_, batch), rows);
}

std::vector<float> Engine::logits_at(const PreparedBatch& batch, std::span<const int64_t> rows) {
  const PreparedBatch& step = checked(batch);
  const Backend::ScratchLoan loan(be_, pool_);  // GEMM conversion scratch in this ledger
  const int64_t T = step.size(), d = cfg_.hidden_size, V = cfg_.vocab_size;
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) {
    if (r < 0 || r >= T)
      throw InputError("logits_at: row " + std::to_string(r) +
                       " outside the batch (T = " + std::to_string(T) + ")");
  }
  Buffer x = forward_layers(step, nullptr, /*whole=*/true);  // (T, d)
  acquire(GradGroup::head, -1);
  SBP_CHECK(weights_.views().lm_head.defined(), "logits_at: the model has no LM head");
  std::vector<float> out(static_cast<size_t>(n * V), 0.0f);
  if (n == 0) {
    release(GradGroup::head, -1);
    return out;
  }
  // Gather the requested rows (they need not be contiguous), then final norm and LM head.
  const DType act = exec_.act_dtype;
  Buffer picked = pool_.allocate(Category::layer_workspace, act, {n, d});  // (n, d)
  for (int64_t i = 0; i < n; ++i) be_.copy(picked.rows(i, i + 1), x.rows(rows[i], rows[i] + 1));
  x.reset();
  Buffer hf = pool_.allocate(Category::layer_workspace, act, {n, d});  // (n, d)
  be_.rmsnorm_forward(hf.view(), picked.view(), weights_.views().final_norm,
                      static_cast<float>(cfg_.rms_norm_eps), cfg_.norm_weight_offset());
  Buffer logits = pool_.allocate(Category::logits, DType::F32, {n, V});  // (n, V)
  be_.gemm(logits.view(), hf.view(), false, weights_.views().lm_head, true, 1.0f, 0.0f);
  if (cfg_.final_logit_softcapping > 0)
    be_.softcap_forward(logits.view(), static_cast<float>(cfg_.final_logit_softcapping));
  release(GradGroup::head, -1);
  return download_f32(logits.view());
}

}  // namespace sbp
