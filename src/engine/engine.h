#pragma once
// The training step (DESIGN §2-§3): forward with layer-input checkpoints, the LM-head pass
// (full or chunked) driven by an objective, and the layer backward in the chosen mode.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "core/communicator.h"
#include "core/pool.h"
#include "core/rng.h"
#include "engine/context_slice.h"
#include "engine/deferred_reads.h"
#include "engine/exec_config.h"
#include "engine/generation.h"
#include "engine/grad_hook.h"
#include "engine/prepared_batch.h"
#include "engine/weight_hook.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/parameters.h"
#include "objective/objective.h"

namespace sbp {

class DecoderLayerOps;
class ResidualGrad;
class RowCollectives;

class Engine {
 public:
  // The engine only reads `weights`; every allocation goes through `pool` (and its ledger).
  Engine(const ModelConfig& cfg, const ParameterSet& weights, Backend& backend, Pool& pool,
         ExecConfig exec);

  // One micro-batch: forward, head, backward. ADDS the gradient into `grads` (zeroing is the
  // caller's job, so micro-batches accumulate). The head is the objective's (HeadKind): the LM
  // head, or the value head of a value model (weights built with ModelHead::value). Objectives
  // with pre-passes (DPO) get them from the kept final hidden state before the gradient pass;
  // with one head block (head: full, or a chunk >= T) the block is computed once for both.
  // `hook` (optional) hears when each group of gradients starts being written and when it is
  // final (grad_hook.h): once per group per call, after the group's whole chunk loop.
  //
  // Every pass takes the micro-batch prepared once (prepared_batch.h), so that passes of
  // several models over one micro-batch share its tables; it must serve this engine's config,
  // backend and pool (an internal error otherwise). The Batch overloads prepare one for the
  // call, for callers with a single pass.
  //
  // `later` (optional): where the objective's reads of values it needs only for its loss go
  // (the completions of the ConstantGrads, PolicyFormula, ValueFormula and SequenceRoute
  // routes, objective/head_route.h; deferred_reads.h), so that the call waits for the device
  // nowhere. The objective's loss and pass_sums() are then complete only once
  // `later` has run, and the objective must live until then. Null: read before returning.
  void forward_backward(const PreparedBatch& batch, Objective& objective, const ParameterSet& grads,
                        GradHook* hook = nullptr, DeferredReads* later = nullptr);
  void forward_backward(const Batch& batch, Objective& objective, const ParameterSet& grads,
                        GradHook* hook = nullptr, DeferredReads* later = nullptr);

  // Forward only (no gradient state). Peak memory: two (T, d) hidden states, one layer's
  // K/V and chunk working set, one head chunk, and the rows' log-probs and argmax gathered on
  // the device (8 bytes a row), read with one wait.
  struct TokenScores {
    std::vector<float> logp;      // (T) log-probability of each row's target, 0 where none
    std::vector<int32_t> argmax;  // (T) the most likely next token of each row
  };
  TokenScores score(const PreparedBatch& batch);
  TokenScores score(const Batch& batch);
  // Forward only: the target log-probs (kind lm) or the values (kind value, a value model) of
  // every row left on the device, (T) F32 (category `other`), for an objective's formula to
  // read there (objective.h ReferenceLogp) or a read at the next wait, without a wait. Memory
  // as score(), then 4 bytes a row for as long as the caller keeps the buffer. Only without a
  // context group (whose ranks each hold their own rows): an internal error otherwise; use
  // score() or values() there.
  Buffer rows_on_device(const PreparedBatch& batch, HeadKind kind);

  // Forward only, value models (ModelHead::value): (T) the value of every row, computed from
  // the final-normed hidden state by score.weight. Same memory as score().
  std::vector<float> values(const PreparedBatch& batch);
  std::vector<float> values(const Batch& batch);

  // Forward only: the (rows.size(), V) logits, row-major, of the given packed rows (each the
  // distribution over the token that follows it; rows may repeat, in any order). For checking
  // a model against another implementation (Hugging Face parity, checkpoint round trips):
  // training never needs the logits themselves. Peak: two (T, d) hidden states, one layer's
  // K/V and chunk working set, and the (rows, V) result.
  std::vector<float> logits_at(const PreparedBatch& batch, std::span<const int64_t> rows);
  std::vector<float> logits_at(const Batch& batch, std::span<const int64_t> rows);

  // Samples one completion of `prompt` (generation.h), one token at a time with a KV cache:
  // every layer's K/V for prompt + max_new_tokens rows (ledger category kv_cache) is filled by
  // the prompt's forward (one chunk of rows, or layer_chunk rows at a time in stream mode), then
  // one row per new token, through the very layer and head code of the training step. The
  // draws come from `rng` only (sampling.h), so a completion depends on the weights, the prompt,
  // the config and the rng state, and on nothing else.
  // Peak: the cache, one layer's working set for the prompt chunk, one (1, V) logits row.
  Generated generate(std::span<const int32_t> prompt, const GenerationConfig& g, Rng& rng);
  // One completion of each prompt, decoded together: the B sequences share one cache (a packed
  // stream of B segments of prompt + max_new_tokens rows each), each prompt's forward runs on
  // its own (a prompt equal to the one before it, as in a GRPO group, copies that one's keys
  // and values instead), then every decoding step takes one row of each unfinished sequence
  // through (B, ...) GEMMs, each row attending to its own segment. Sequence b draws only from
  // rngs[b], so its completion is the one generate(prompts[b], g, rngs[b]) samples, up to the
  // rounding of a B-row GEMM against a 1-row one.
  // Peak: the B sequences' cache, one prompt's chunk working set, (B, V) logits.
  std::vector<Generated> generate_batch(std::span<const std::vector<int32_t>> prompts,
                                        const GenerationConfig& g, std::span<Rng> rngs);

  const ExecConfig& exec() const { return exec_; }

  // Context parallelism (engine/context_slice.h, docs/DISTRIBUTED.md): this engine is rank
  // group->rank() of a context group whose ranks run the same passes on the same micro-batch,
  // each over its own rows. forward_backward then ADDS only this rank's rows' share of the
  // gradient (the group's sum is the micro-batch's gradient; the caller reduces it); the
  // objective's loss and metrics are the whole micro-batch's on every rank (Objective::
  // pass_sums); score() and values() return every row on every rank. Stream and checkpoint
  // modes only (InputError otherwise). Null (the default) or a group of one: the ordinary step.
  // logits_at() and generation always run the whole sequence on this rank.
  void set_context(Communicator* group) { context_ = group && group->size() > 1 ? group : nullptr; }
  // The rows this rank owns of a T-row micro-batch (one piece [0, T) without a context group).
  ContextSlice slice(int64_t T) const {
    return context_ ? ContextSlice(T, context_->size(), context_->rank()) : ContextSlice(T, 1, 0);
  }

  // LoRA (model/lora.h): every layer runs with these adapters; forward_backward adds their
  // gradients into `grads` (null: none). Null weights: the base model, adapters off (LoRA's
  // reference model). The base gradients passed to forward_backward may then be unallocated
  // (ParameterSet::unallocated): frozen tensors get no gradient.
  // ZeRO-3 (weight_hook.h): the weights' tensors are bound only while a pass reads them; the
  // hook binds each group before it runs and hears when it is done. Null: always bound.
  // Generation holds every layer at once (its KV cache walks all layers per token): refused.
  void set_weight_hook(WeightHook* hook) { weight_hook_ = hook; }

  void set_lora(const LoraSet* weights, const LoraSet* grads) {
    lora_w_ = weights;
    lora_g_ = grads;
  }

 private:
  struct Kept;  // what the forward keeps for the backward (engine.cpp)
  // The prepared batch, checked against this engine's config, backend and pool.
  const PreparedBatch& checked(const PreparedBatch& batch) const;
  // Throws InputError when the model lacks the head the objective drives.
  void check_head(const Objective& objective) const;
  // The forward through every layer, in row chunks of exec_.layer_chunk_for(T) (one chunk of T
  // in store and recompute modes). With `kept` (training): every layer's input x_l stays in
  // kept->inputs and, in store mode, every layer's K/V and activations too; without (scoring):
  // only the current layer's input and output are alive. Returns the final hidden state
  // (T, d) before the final norm.
  // With a context group: only this rank's rows, in its local rows (context_slice.h).
  Buffer forward_layers(const PreparedBatch& step, Kept* kept, bool whole = false);
  // The head over blocks of rows (one block of T in `full` mode) on the objective's route
  // (objective/head_route.h, engine/head_routes.h); head weight gradients ADD into G,
  // dL/d(hidden) into gy (T, d).
  void head_backward(const PreparedBatch& step, const Tensor& hidden, Objective& objective,
                     const ModelTensors& G, ResidualGrad& gy, DeferredReads* later);
  // The final hidden rows x (this rank's, local rows) through the head block by block, on the
  // device: their target log-probs (LM head) or values (value head) into rows (Tl) F32 and,
  // given, their argmax into best (Tl) I32.
  void head_rows(const PreparedBatch& step, const ContextSlice& cs, const Tensor& x, HeadKind kind,
                 const Tensor& rows, const Tensor& best);
  // Layers L-1 .. 0 in the exec mode; gy (T, d): in dL/d(final hidden), out dL/d(x_0).
  void layers_backward(const PreparedBatch& step, Kept& kept, const ModelTensors& G,
                       ResidualGrad& gy, GradHook* hook);
  // x (n, d) = the embeddings of ids (n).
  void embed(const Tensor& x, const Tensor& ids);
  // The host pool checkpoints are offloaded to (exec_.offload), or null when nothing is;
  // InputError when offload is asked for and the pool has no host pool.
  Pool* offload_pool() const;

  const ModelConfig& cfg_;
  const ParameterSet& weights_;
  Backend& be_;
  Pool& pool_;
  ExecConfig exec_;
  const LoraSet* lora_w_ = nullptr;
  const LoraSet* lora_g_ = nullptr;
  // Binds layer l's adapters (if any) to ops.
  void bind_lora(DecoderLayerOps& ops, size_t l) const;
  // InputError when the exec mode cannot run with a context group.
  void check_context() const;
  // The K/V phase of layer l on this rank's rows of x (local rows), then every rank's rows:
  // the first half's pieces gathered on return; the second half's too, or (second_half given)
  // issued into it, for the caller to wait for.
  void context_kv(DecoderLayerOps& ops, const LayerTensors& w, const ContextSlice& cs,
                  const Tensor& x, int64_t chunk, LayerKV& kv, RowCollectives* second_half);
  Communicator* context_ = nullptr;
  WeightHook* weight_hook_ = nullptr;
  // weight_hook_'s calls, nothing without one.
  void acquire(GradGroup g, int64_t layer) const {
    if (weight_hook_) weight_hook_->weights_acquire(g, layer);
  }
  void prefetch(GradGroup g, int64_t layer) const {
    if (weight_hook_) weight_hook_->weights_prefetch(g, layer);
  }
  void release(GradGroup g, int64_t layer) const {
    if (weight_hook_) weight_hook_->weights_release(g, layer);
  }
};

}  // namespace sbp
