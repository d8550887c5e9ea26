#include "engine/engine.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "engine/context_rows.h"
#include "engine/head_block.h"
#include "engine/residual_grad.h"
#include "engine/window_stream.h"
#include "model/decoder_layer.h"
#include "objective/sequence_rows.h"

namespace sbp {

namespace {

// The chunks a loop over [0, T) in `chunk`-row pieces runs. A backend that computes runs every
// chunk. One that skips repeated chunks (the planner's) runs, of the full-sized chunks, the first
// two and the last two, and the shorter last chunk: every buffer a chunk allocates is sized by its
// row count alone (n rows of something), and each chunk frees what it allocated before the next
// begins, so a skipped chunk would repeat the allocations of the one before it from the same
// ledger state. The peak and its breakdown are unchanged (the plan-equals-measurement tests
// compare them with real runs, which run every chunk) and planning 10^8 tokens costs what
// planning 10^4 does. The second and second-to-last runs keep that true even if a first
// chunk ever allocated something lazily that later chunks reuse.
struct ChunkRange {
  int64_t T, chunk, count, full;  // full: chunks of exactly `chunk` rows, indices [0, full)
  bool skip;
  ChunkRange(int64_t t, int64_t c, const Backend& be)
      : T(t), chunk(c), count((t + c - 1) / c), full(t / c), skip(be.skips_repeated_chunks()) {}
  bool runs(int64_t c) const { return !skip || c < 2 || c >= full - 2; }
};

// Calls fn(begin, end) for consecutive chunks of `chunk` rows covering [0, T).
template <class Fn>
void for_chunks(const ChunkRange& r, Fn fn) {
  for (int64_t c = 0; c < r.count; ++c) {
    if (!r.runs(c)) c = r.full - 2;  // jump over the repeats
    fn(c * r.chunk, std::min(r.T, (c + 1) * r.chunk));
  }
}

// Same, last chunk first (the order StreamBP's backward needs).
template <class Fn>
void for_chunks_reversed(const ChunkRange& r, Fn fn) {
  for (int64_t c = r.count - 1; c >= 0; --c) {
    if (!r.runs(c)) c = 1;
    fn(c * r.chunk, std::min(r.T, (c + 1) * r.chunk));
  }
}

// The embedding multiplier in the activation dtype (ModelConfig::embed_scale).
float embed_scale_in(const ModelConfig& cfg, DType act) {
  return cfg.embed_scale(act == DType::BF16);
}

// Calls fn(piece, begin, end) for the chunks of `chunk` rows of each of this rank's pieces, in
// row order; begin and end are rows of the piece (global rows piece.begin + begin ..., local
// rows piece.local + begin ...).
template <class Fn>
void for_piece_chunks(const ContextSlice& cs, int64_t chunk, const Backend& be, Fn fn) {
  for (const RowPiece& p : cs.mine())
    for_chunks(ChunkRange(p.size(), chunk, be), [&](int64_t s, int64_t e) { fn(p, s, e); });
}

// Sums the objective's row-additive accumulators over the context group (Objective::pass_sums).
void sum_over_group(Communicator* group, std::vector<std::span<double>> parts) {
  if (!group || parts.empty()) return;
  std::vector<double> all;
  for (const std::span<double>& part : parts) all.insert(all.end(), part.begin(), part.end());
  group->sum(std::span<double>(all));
  size_t at = 0;
  for (const std::span<double>& part : parts)
    for (double& v : part) v = all[at++];
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
  head_backward(step, hidden.view(), objective, grads.views(), gy, later);
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
  const int64_t T = step.size();
  const ContextSlice cs = slice(T);  // hidden and gy hold this rank's rows (local rows)
  const int64_t hc = exec_.head_chunk_for(T);
  const bool entropy = objective.wants_entropy();
  const bool computes = be_.computes();
  const int passes = objective.prepasses();
  const bool lm = objective.head() == HeadKind::lm;
  // A sequence-level objective (DPO, ORPO, KTO) on one process's rows: the pre-pass and the
  // gradients stay on the device. With a context group the per-sequence sums span the ranks,
  // which the host sums (prepass_sums), so the host path below runs.
  const SequenceTerms* sequence =
      lm && passes == 1 && !entropy && !cs.split() ? objective.sequence_terms() : nullptr;
  if (sequence) {
    sequence_head_backward(step, hidden, objective, *sequence, G, gy, later);
    return;
  }
  // Rows [s, e) of piece p: hidden's local rows, the batch's global rows.
  auto block = [&](const RowPiece& p, int64_t s, int64_t e, bool to_host = true) {
    return HeadBlock(cfg_, be_, pool_, weights_.views(), exec_.act_dtype, objective.head(), entropy,
                     hidden.slice_rows(p.local + s, p.local + e),
                     step.targets().slice_rows(p.begin + s, p.begin + e), p.begin + s, to_host);
  };
  // Pre-passes (no grad): every block once per pass, from the kept final hidden state; with a
  // context group, each rank its own blocks, then the group sums what they added up. The blocks
  // leave their numbers on the device; the host reads the pass once and shows them to the
  // objective block by block, in row order. With a single block the gradient pass below reuses
  // it instead of recomputing it.
  const bool one_block = !cs.split() && hc >= T;
  for (int p = 0; p < passes && !one_block; ++p) {
    HeadPassRows rows(be_, pool_, objective.head(), entropy, cs.local_rows());
    for_piece_chunks(cs, hc, be_, [&](const RowPiece& piece, int64_t s, int64_t e) {
      rows.keep(block(piece, s, e, /*to_host=*/false), piece.local + s);
    });
    const HeadPassRows::Host host = rows.read(/*at_next_wait=*/false);  // the pass's one wait
    if (!computes) continue;
    for_piece_chunks(cs, hc, be_, [&](const RowPiece& piece, int64_t s, int64_t e) {
      objective.prepass(p, host.chunk(piece.local + s, e - s, piece.begin + s));
    });
    sum_over_group(context_, objective.prepass_sums(p));
    objective.finish_prepass(p);
  }
  // An objective whose gradients need none of this pass's values (objective.h
  // grads_without_logp: SFT; DPO, KTO and ORPO after their pre-pass) writes them without
  // waiting for the device. Without a pre-pass its loss reads the values (SFT): the blocks
  // leave them on the device, gathered in one (Tl) vector that the host reads once, after the
  // pass or, given `later`, at the step's end.
  // A policy-gradient objective (GRPO, PPO's policy and value; objective.h policy_terms and
  // value_terms) has the backend compute its gradients from each block's log-probs (values)
  // and constants, and reads the pass's numbers once afterwards for its loss and statistics,
  // as SFT does.
  const PolicyTerms* terms = lm && passes == 0 ? objective.policy_terms() : nullptr;
  const ValueTerms* vterms = !lm && passes == 0 ? objective.value_terms() : nullptr;
  const bool formula = terms || vterms;
  const bool constant = !formula && objective.grads_without_logp() && lm && !entropy;
  const bool gathered = (constant && passes == 0) || formula;
  // (Tl) the gradient pass's log-probs [+ entropies] or values, this rank's rows
  std::optional<HeadPassRows> pass_rows;
  if (gathered) pass_rows.emplace(be_, pool_, objective.head(), terms && entropy, cs.local_rows());
  std::vector<float> constants;  // (n, 4) or (n, 3) host constants of a block
  // (T, 4) or (T, 3): the whole batch's constants where the backend holds them (objective.h
  // rows_on_device), read there by each block
  const Tensor on_device = formula ? objective.rows_on_device() : Tensor();
  SBP_CHECK(!on_device.defined() || (!cs.split() && on_device.rows() == T),
            "objective: its rows on the device must cover the batch, without a context group");
  for_piece_chunks(cs, hc, be_, [&](const RowPiece& piece, int64_t s, int64_t e) {
    HeadBlock b =
        block(piece, s, e, /*to_host=*/!(constant || formula) || (one_block && passes > 0));
    for (int p = 0; p < passes && one_block; ++p) {
      if (computes) objective.prepass(p, b.chunk());
      if (computes) objective.finish_prepass(p);
    }
    TokenChunkGrads g;  // the host's gradients (none with a formula: the backend writes them)
    if (!formula) g = b.alloc_grads();
    if (formula) {
      // The block's constants: where the backend holds them already, a view; else from the host.
      HeadBlock::Rows block_rows;
      if (on_device.defined()) {
        block_rows.device = on_device.slice_rows(piece.begin + s, piece.begin + e);
      } else {
        const int width = terms ? kPolicyRowWidth : kValueRowWidth;
        constants.assign(computes ? static_cast<size_t>((e - s) * width) : 0, 0.0f);
        if (computes && terms) objective.policy_rows(piece.begin + s, constants);
        if (computes && vterms) objective.value_rows(piece.begin + s, constants);
        block_rows.host = constants;
      }
      if (terms) {
        const ReferenceLogp* ref = objective.policy_reference();
        b.policy_grads(*terms, block_rows,
                       ref && ref->device.defined()
                           ? ref->device.slice_rows(piece.begin + s, piece.begin + e)
                           : Tensor());
      }
      if (vterms) b.value_grads(*vterms, block_rows);
      pass_rows->keep(b, piece.local + s);
    } else if (constant) {
      if (computes) objective.constant_grads(piece.begin + s, g.dlogp);
      if (gathered) pass_rows->keep(b, piece.local + s);
    } else if (computes) {
      objective.chunk_grads(b.chunk(), g);
    }
    b.backward(G, gy.open(piece.local + s, piece.local + e));
    gy.close();
  });
  if (!gathered) {
    if (computes) sum_over_group(context_, objective.pass_sums());
    return;
  }
  // The pass's one read of the log-probs, now or at the device's next wait (the step's,
  // deferred_reads.h). Then each piece's rows in row order, which adds the loss in the blocks'
  // order (add_logp and add_values walk their rows one after another, whatever the blocks
  // were), and the group's sums, which need every rank's pass.
  const HeadPassRows::Host host = pass_rows->read(/*at_next_wait=*/later != nullptr);
  pass_rows.reset();
  if (!computes) return;
  auto read = [host, &objective, group = context_, formula,
               pieces = std::vector<RowPiece>(cs.mine().begin(), cs.mine().end())] {
    for (const RowPiece& piece : pieces) {
      const TokenChunk rows = host.chunk(piece.local, piece.size(), piece.begin);
      if (formula)
        objective.add_values(rows);
      else
        objective.add_logp(piece.begin, rows.logp);
    }
    sum_over_group(group, objective.pass_sums());
  };
  if (later)
    later->add(read);
  else
    read();
}

void Engine::sequence_head_backward(const PreparedBatch& step, const Tensor& hidden,
                                    Objective& objective, const SequenceTerms& terms,
                                    const ModelTensors& G, ResidualGrad& gy, DeferredReads* later) {
  const int64_t T = step.size();
  const int64_t hc = exec_.head_chunk_for(T);
  const bool computes = be_.computes();
  const ChunkRange range(T, hc, be_);
  auto block = [&](int64_t s, int64_t e) {
    return HeadBlock(cfg_, be_, pool_, weights_.views(), exec_.act_dtype, HeadKind::lm, false,
                     hidden.slice_rows(s, e), step.targets().slice_rows(s, e), s,
                     /*to_host=*/false);
  };
  // The objective's constants on the device, uploaded without a wait: (T) row weights, (S + 1)
  // sequence offsets, (S) labels (KTO), and the reference's (T) log-probs where they are only
  // on the host (a reference scored with a context group, or an objective built from host
  // values).
  const Objective::SequenceInputs in = objective.sequence_inputs();
  const int64_t S = static_cast<int64_t>(in.begin.size()) - 1;
  SBP_CHECK(static_cast<int64_t>(in.weight.size()) == T && S >= 0 && in.begin.back() == T &&
                T <= INT32_MAX,
            "sequence objective: its rows do not match the batch");
  Buffer weight = pool_.allocate(Category::other, DType::F32, {T});     // (T)
  Buffer begin = pool_.allocate(Category::other, DType::I32, {S + 1});  // (S + 1)
  Buffer label, ref_upload;
  if (!in.label.empty()) label = pool_.allocate(Category::other, DType::F32, {S});  // (S)
  Tensor ref;  // (T) F32 or undefined
  if (in.reference && in.reference->device.defined()) {
    ref = in.reference->device;
  } else if (in.reference) {
    ref_upload = pool_.allocate(Category::other, DType::F32, {T});  // (T)
    ref = ref_upload.view();
  }
  if (computes) {
    upload_f32(weight.view(), in.weight);
    upload_i32(begin.view(), offsets_i32(in.begin));
    if (label.defined()) upload_f32(label.view(), in.label);
    if (ref_upload.defined()) upload_f32(ref_upload.view(), *in.reference->host);
  }
  HeadPassRows pre(be_, pool_, HeadKind::lm, false, T);  // (T) the pre-pass's log-probs
  Buffer dlogp;                                          // (T) every row's dL/dlogp
  HeadPassRows::Host host;
  // Once the pre-pass's blocks are all kept: the gradients from them, then the pre-pass's one
  // read (at the step's end, given `later`).
  auto gradients = [&] {
    dlogp = pool_.allocate(Category::other, DType::F32, {T});
    be_.sequence_token_grads(dlogp.view(), pre.logp(), ref, weight.view(), begin.view(),
                             label.defined() ? label.view() : Tensor(), terms, in.kl_parts);
    host = pre.read(/*at_next_wait=*/later != nullptr);
    weight.reset();
    begin.reset();
    label.reset();
    ref_upload.reset();
  };
  // With a single block the gradient pass reuses the pre-pass's block.
  const bool one_block = hc >= T;
  if (!one_block) {
    for_chunks(range, [&](int64_t s, int64_t e) { pre.keep(block(s, e), s); });
    gradients();
  }
  for_chunks(range, [&](int64_t s, int64_t e) {
    HeadBlock b = block(s, e);
    if (one_block) {
      pre.keep(b, s);
      gradients();
    }
    b.grads_from(dlogp.view().slice_rows(s, e));
    b.backward(G, gy.open(s, e));
    gy.close();
  });
  dlogp.reset();
  if (!computes) return;
  // The host's pre-pass, for the loss and statistics: the blocks' rows in row order, as the
  // host path shows them, so the same sums.
  auto read = [host, &objective, T, hc] {
    for (int64_t s = 0; s < T; s += hc)
      objective.prepass(0, host.chunk(s, std::min(T, s + hc) - s, s));
    objective.finish_prepass(0);
  };
  if (later)
    later->add(read);
  else
    read();
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
    // Every chunk of layer l is done: its weight gradients are complete for this call.
    if (hook) hook->grads_final(GradGroup::layer, l);
  }
}

Pool* Engine::offload_pool() const {
  if (!exec_.offload.any()) return nullptr;
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
  for (const RowPiece& p : cs.mine())
    embed(x.rows(p.local, p.local + p.size()), step.tokens().slice_rows(p.begin, p.end));
  for (size_t li = 0; li < L; ++li) {
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
  head_rows(step, cs, x.view(), HeadKind::lm, logp.view(), best.view());
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
  head_rows(step, cs, x.view(), kind, rows.view(), Tensor());
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
  head_rows(step, cs, x.view(), HeadKind::value, values.view(), Tensor());
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
  SBP_CHECK(weights_.views().lm_head.defined(), "logits_at: the model has no LM head");
  Buffer x = forward_layers(step, nullptr, /*whole=*/true);  // (T, d)
  std::vector<float> out(static_cast<size_t>(n * V), 0.0f);
  if (n == 0) return out;
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
  return download_f32(logits.view());
}

}  // namespace sbp
