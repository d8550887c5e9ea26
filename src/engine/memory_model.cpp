#include "engine/memory_model.h"

#include <algorithm>
#include <initializer_list>

#include "core/checked_math.h"
#include "engine/window_stream.h"

namespace sbp {

namespace {

// The terms multiply a user's T by model dimensions: checked, so an absurd length is an error.
constexpr const char* kWhat = "the analytic stream-mode memory";
int64_t prod(std::initializer_list<int64_t> f) { return checked_product(f, kWhat); }
int64_t sum(std::initializer_list<int64_t> terms) {
  int64_t s = 0;
  for (int64_t t : terms) s = checked_add(s, t, kWhat);
  return s;
}

}  // namespace

int64_t StreamMemoryTerms::activation_peak() const {
  return sum({checkpoints, grad_buffer, step_tables,
              std::max(sum({kv, dkv, chunk_working_set}), head_chunk)});
}

StreamMemoryTerms stream_memory_terms(const ModelConfig& cfg, int64_t T, int64_t c, int64_t ch,
                                      DType act) {
  const int64_t a = static_cast<int64_t>(dtype_size(act)), f = 4;
  const int64_t d = cfg.hidden_size, F = cfg.intermediate_size, L = cfg.num_hidden_layers;
  const int64_t H = cfg.num_attention_heads, Hh = prod({H, cfg.head_dim});
  const int64_t Gh = prod({cfg.num_key_value_heads, cfg.head_dim});
  StreamMemoryTerms m;
  m.checkpoints = prod({L + 1, T, d, a});
  m.grad_buffer = prod({T, d, f});
  // K/V rows the largest layer holds: T, or for a sliding layer whose window frame is shorter
  // than T, that many (engine/window_stream.h); the largest layer sets the peak.
  int64_t kv_rows = 0;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t w = cfg.layer_window(l);
    kv_rows = std::max(kv_rows, w > 0 && window_frame_rows(w, c) < T ? window_frame_rows(w, c) : T);
  }
  m.kv = prod({2, kv_rows, Gh, a});
  m.dkv = prod({2, kv_rows, Gh, f});
  // One chunk recomputed for its backward keeps: the normed input (d), queries (Hh, plus the
  // pre-norm queries for qk-norm models), the attention output (Hh) and its log-sum-exp (H),
  // the residual after attention and its norm (2d), gate and up (2F); the MLP backward's
  // peak adds the fp32 gradients of the product, of gate and of up (3F).
  // Gemma's sandwich norms keep the attention projection and the MLP output (2d more).
  const int64_t q_terms = cfg.qk_norm() ? 2 * Hh : Hh;
  const int64_t sandwich = cfg.sandwich_norms() ? 2 * d : 0;
  const int64_t per_row_act = sum({3 * d, q_terms, Hh, 2 * F, sandwich});
  m.chunk_working_set = prod({c, sum({prod({per_row_act, a}), H * f, 3 * F * f})});
  // Logits block, the normed hidden rows and their gradient, three per-row scalars, and the
  // pass's (T) log-probs gathered on the device for SFT (engine.cpp head_backward).
  // Soft-capped logits (Gemma) keep a second logits block for the backward.
  const int64_t logit_blocks = cfg.final_logit_softcapping > 0 ? 2 : 1;
  m.head_chunk = sum({prod({logit_blocks, ch, cfg.vocab_size, a}), prod({ch, d, a + f}),
                      prod({3, ch, f}), prod({T, f})});
  m.step_tables = prod({4, T, 4});  // tokens, targets, positions, segment starts (rope table aside)
  return m;
}

}  // namespace sbp
