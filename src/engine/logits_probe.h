#pragma once
// Logits of selected rows of a packed batch, for checking a model against a reference
// implementation (Hugging Face parity tests, checkpoint round trips). Training never needs the
// logits themselves (the head streams them, DESIGN §2), so this is a separate, forward-only
// path: the same DecoderLayerOps and kernels as Engine::score, chunked the same way, with the
// final norm and LM head applied only to the rows asked for.
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "engine/batch.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/parameters.h"

namespace sbp {

// Returns the (rows.size(), V) logits, row-major: row i holds the logits computed at packed
// row rows[i] (the distribution over the token that follows it). Rows may repeat and come in
// any order; each must lie in [0, batch.size()). Layers run in row chunks of
// exec.layer_chunk_for(T), like Engine::score. Peak memory: two (T, d) hidden states, one
// layer's K/V and chunk working set, and the (rows, V) result.
std::vector<float> probe_logits(const ModelConfig& cfg, const ParameterSet& weights,
                                Backend& be, Pool& pool, const Batch& batch,
                                const ExecConfig& exec, std::span<const int64_t> rows);

}  // namespace sbp
