// Engine::generate: one completion with a KV cache, through the training step's own layer and
// head code (engine.h explains the memory and the reproducibility).
#include <algorithm>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "engine/engine.h"
#include "engine/head_block.h"
#include "engine/prepared_batch.h"
#include "model/decoder_layer.h"

namespace sbp {

const char* finish_reason_name(FinishReason r) {
  return r == FinishReason::stop ? "stop" : "length";
}

namespace {

void check_prompt(std::span<const int32_t> prompt, size_t index, const GenerationConfig& g,
                  const ModelConfig& cfg) {
  const std::string what = "generate: prompt " + std::to_string(index);
  const int64_t P = static_cast<int64_t>(prompt.size());
  if (P == 0) throw InputError(what + " is empty");
  const int64_t T = checked_add(P, g.max_new_tokens, "generate: prompt + max_new_tokens");
  // Dynamic rope is made for lengths beyond max_position_embeddings (transformers' generate
  // goes past it with every type; for the others streambp keeps the model's stated limit).
  if (T > cfg.max_position_embeddings && cfg.rope_scaling.type != RopeScalingType::dynamic)
    throw InputError(what + " (" + std::to_string(P) + " tokens) + max_new_tokens (" +
                     std::to_string(g.max_new_tokens) + ") exceeds max_position_embeddings (" +
                     std::to_string(cfg.max_position_embeddings) + ")");
  for (int64_t i = 0; i < P; ++i)
    if (prompt[i] < 0 || prompt[i] >= cfg.vocab_size)
      throw InputError(what + ": token " + std::to_string(i) + " (" + std::to_string(prompt[i]) +
                       ") is outside the vocabulary [0, " + std::to_string(cfg.vocab_size) + ")");
}

}  // namespace

Generated Engine::generate(std::span<const int32_t> prompt, const GenerationConfig& g, Rng& rng) {
  const std::vector<int32_t> one(prompt.begin(), prompt.end());
  return std::move(generate_batch({&one, 1}, g, {&rng, 1}).front());
}

std::vector<Generated> Engine::generate_batch(std::span<const std::vector<int32_t>> prompts,
                                              const GenerationConfig& g, std::span<Rng> rngs) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  if (B == 0) throw InputError("generate: no prompts");
  SBP_CHECK(rngs.size() == prompts.size(), "generate: one rng per prompt");
  if (g.max_new_tokens < 1) throw InputError("generate: max_new_tokens must be at least 1");
  g.sampling.validate("generate");
  if (weight_hook_)
    throw InputError(
        "generate: the weights are sharded (dist.zero: 3); generation reads every layer for each "
        "token and is not supported with them yet");
  const Backend::ScratchLoan loan(be_, pool_);  // GEMM conversion scratch in this ledger
  for (size_t b = 0; b < prompts.size(); ++b) check_prompt(prompts[b], b, g, cfg_);
  SBP_CHECK(weights_.views().lm_head.defined(), "generate: the model has no LM head");

  // One packed stream of B segments, sequence b at rows [base[b], base[b] + P_b + max_new):
  // the cache's rows are the stream's rows, so the prompt's forward is the training step's call
  // on a row range and a decoding step is decode_forward on one row per sequence.
  Batch whole;
  std::vector<int64_t> base(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& p = prompts[static_cast<size_t>(b)];
    base[static_cast<size_t>(b)] = static_cast<int64_t>(whole.tokens.size());
    whole.tokens.insert(whole.tokens.end(), p.begin(), p.end());
    whole.tokens.resize(whole.tokens.size() + static_cast<size_t>(g.max_new_tokens), 0);
    whole.seq_lens.push_back(static_cast<int64_t>(p.size()) + g.max_new_tokens);
  }
  const int64_t T = static_cast<int64_t>(whole.tokens.size());
  // The prompts' forward serves the longest prompt's positions at once (dynamic rope's length).
  int64_t longest_prompt = 0;
  for (const std::vector<int32_t>& p : prompts)
    longest_prompt = std::max(longest_prompt, static_cast<int64_t>(p.size()));
  const PreparedBatch step(cfg_, be_, pool_, whole, longest_prompt);
  const int64_t d = cfg_.hidden_size, V = cfg_.vocab_size;
  const DType act = exec_.act_dtype;
  // One set of ops per layer: a layer's ops know its attention kind (Gemma: sliding or full).
  std::vector<DecoderLayerOps> ops;
  std::vector<LayerKV> cache;
  ops.reserve(weights_.views().layers.size());
  for (size_t l = 0; l < weights_.views().layers.size(); ++l) {
    ops.emplace_back(cfg_, be_, pool_, step.tables(), act, static_cast<int64_t>(l));
    bind_lora(ops.back(), l);
    cache.push_back(ops.back().alloc_kv(T, Category::kv_cache, false));
  }
  // (n, d) final hidden rows -> the (n, V) logits, row-major in host memory. A shape-only
  // backend's logits are zeros that nobody reads past the first token (the decoding loop stops
  // after one step there), so only single rows are brought over: a (B, V) block of zeros for
  // 4096 completions was gigabytes of the planner's host memory.
  const auto head_logits = [&](const Tensor& hidden) {
    const Buffer no_target = index_table(be_, pool_, hidden.rows(), [&] {
      return std::vector<int32_t>(static_cast<size_t>(hidden.rows()), -1);
    });
    const HeadBlock head(cfg_, be_, pool_, weights_.views(), act, HeadKind::lm, false, hidden,
                         no_target.view(), 0);
    if (!be_.computes() && hidden.rows() > 1) return std::vector<float>();
    return download_f32(head.logits());
  };

  // A prompt's rows [s, e) through every layer (in layer_chunk pieces in stream mode); returns
  // the (V) logits of row e - 1.
  const auto prefill = [&](int64_t s, int64_t e) {
    const int64_t chunk = std::max<int64_t>(1, exec_.layer_chunk_for(e - s));
    Buffer last = pool_.allocate(Category::layer_workspace, act, {1, d});  // (1, d)
    for (int64_t cs = s; cs < e; cs += chunk) {
      const int64_t ce = std::min(e, cs + chunk);
      Buffer x = pool_.allocate(Category::layer_workspace, act, {ce - cs, d});  // (n, d)
      embed(x.view(), step.tokens().slice_rows(cs, ce));
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
    return head_logits(last.view());
  };

  // (V) per sequence; a sequence that shares its predecessor's prompt reads that one's logits
  // (`source`) until its first decoding step gives it its own, so a group holds one copy.
  std::vector<std::vector<float>> logits(static_cast<size_t>(B));
  std::vector<size_t> source(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const size_t i = static_cast<size_t>(b);
    const int64_t P = static_cast<int64_t>(prompts[i].size());
    if (b > 0 && prompts[i] == prompts[i - 1]) {
      // The same prompt as the sequence before (GRPO's group): its keys and values are the
      // same numbers, copied rather than computed again.
      for (LayerKV& kv : cache) {
        be_.copy(kv.k.rows(base[i], base[i] + P), kv.k.rows(base[i - 1], base[i - 1] + P));
        be_.copy(kv.v.rows(base[i], base[i] + P), kv.v.rows(base[i - 1], base[i - 1] + P));
      }
      source[i] = source[i - 1];
    } else {
      logits[i] = prefill(base[i], base[i] + P);
      source[i] = i;
    }
  }

  std::vector<Generated> out(static_cast<size_t>(B));
  std::vector<int64_t> active(static_cast<size_t>(B));  // sequences still generating
  for (int64_t b = 0; b < B; ++b) active[static_cast<size_t>(b)] = b;
  for (int64_t t = 0;; ++t) {
    // Each active sequence draws its token t from its logits and its own rng.
    std::vector<int64_t> next, rows;
    std::vector<int32_t> ids, positions;
    // Sequences that read the same logits (a group's first token) and draw the same id get the
    // same log-prob, and greedy ones the same id: computed once per group, not once per
    // sequence (each is O(V); 4096 completions of a 150k vocabulary took seconds).
    size_t last_source = logits.size();
    int32_t last_id = -1;
    float last_logprob = 0.0f;
    for (int64_t b : active) {
      const size_t i = static_cast<size_t>(b);
      Generated& o = out[i];
      const std::vector<float>& lg = logits[source[i]];
      SBP_CHECK(static_cast<int64_t>(lg.size()) == V, "generate: logits of the wrong size");
      const bool same_logits = source[i] == last_source;
      const int32_t id = same_logits && g.sampling.greedy ? last_id
                                                          : choose_token(lg, g.sampling, rngs[i]);
      if (!same_logits || id != last_id)
        last_logprob = static_cast<float>(token_logprob(lg, id));
      last_source = source[i];
      last_id = id;
      o.ids.push_back(id);
      o.logprobs.push_back(last_logprob);
      if (std::find(g.stop_ids.begin(), g.stop_ids.end(), id) != g.stop_ids.end() ||
          (g.stop_after && g.stop_after(o.ids))) {
        o.finish = FinishReason::stop;
        continue;
      }
      if (t + 1 == g.max_new_tokens) {
        o.finish = FinishReason::length;
        continue;
      }
      // The new token becomes the sequence's next row.
      const int64_t pos = static_cast<int64_t>(prompts[i].size()) + t;
      next.push_back(b);
      rows.push_back(base[i] + pos);
      ids.push_back(id);
      positions.push_back(static_cast<int32_t>(pos));
    }
    active = std::move(next);
    if (active.empty()) break;
    // One row per active sequence through every layer and the head.
    const int64_t n = static_cast<int64_t>(active.size());
    const Buffer id_table = upload_table(pool_, ids);
    const Buffer pos_table = upload_table(pool_, positions);
    Buffer x = pool_.allocate(Category::layer_workspace, act, {n, d});  // (n, d)
    embed(x.view(), id_table.view());
    for (size_t l = 0; l < cache.size(); ++l) {
      Buffer y = pool_.allocate(Category::layer_workspace, act, {n, d});  // (n, d)
      ops[l].decode_forward(weights_.views().layers[l], x.view(), pos_table.view(), rows,
                            cache[l], y.view());
      x = std::move(y);
    }
    const std::vector<float> block = head_logits(x.view());  // (n, V)
    // The planner's backend computes nothing: the cache, the prompts' pass and one decoding
    // step of every sequence are its whole peak.
    if (!be_.computes()) break;
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(active[static_cast<size_t>(j)]);
      logits[i].assign(block.begin() + j * V, block.begin() + (j + 1) * V);
      source[i] = i;
    }
  }
  return out;
}

}  // namespace sbp
