#include "engine/memory_model.h"

#include <algorithm>

namespace sbp {

int64_t StreamMemoryTerms::activation_peak() const {
  return checkpoints + grad_buffer + step_tables +
         std::max(kv + dkv + chunk_working_set, head_chunk);
}

StreamMemoryTerms stream_memory_terms(const ModelConfig& cfg, int64_t T, int64_t c, int64_t ch,
                                      DType act) {
  const int64_t a = static_cast<int64_t>(dtype_size(act)), f = 4;
  const int64_t d = cfg.hidden_size, F = cfg.intermediate_size, L = cfg.num_hidden_layers;
  const int64_t H = cfg.num_attention_heads, Hh = H * cfg.head_dim;
  const int64_t Gh = cfg.num_key_value_heads * cfg.head_dim;
  StreamMemoryTerms m;
  m.checkpoints = (L + 1) * T * d * a;
  m.grad_buffer = T * d * f;
  m.kv = 2 * T * Gh * a;
  m.dkv = 2 * T * Gh * f;
  // One chunk recomputed for its backward keeps: the normed input (d), queries (Hh, plus the
  // pre-norm queries for qk-norm models), the attention output (Hh) and its log-sum-exp (H),
  // the residual after attention and its norm (2d), gate and up (2F); the MLP backward's
  // peak adds the fp32 gradients of the product, of gate and of up (3F).
  const int64_t q_terms = cfg.qk_norm() ? 2 * Hh : Hh;
  m.chunk_working_set = c * ((3 * d + q_terms + Hh + 2 * F) * a + H * f + 3 * F * f);
  // Logits block, the normed hidden rows and their gradient, three per-row scalars.
  m.head_chunk = ch * cfg.vocab_size * a + ch * d * (a + f) + 3 * ch * f;
  m.step_tables = 4 * T * 4;  // tokens, targets, positions, segment starts (rope table aside)
  return m;
}

}  // namespace sbp
