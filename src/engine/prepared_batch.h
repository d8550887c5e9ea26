#pragma once
// A micro-batch made ready for the engine once (issue 30 item 5): validated, its index tables
// uploaded and its rope table(s) built, so that every pass over it (a reference model's
// scoring, the policy's forward/backward, a value model's passes) reads the same tensors
// instead of rebuilding them per Engine call. DPO runs two passes over a micro-batch, PPO up
// to five; the step runner (step/micro_batch_prep.h) builds one per micro-batch and model
// config and hands it to each.
//
// Besides the batch it depends on the backend (whose memory holds the tables), the pool (whose
// ledger counts them: category `other`, alive as long as this object) and three things of the
// model's config: the vocabulary (validation), the head dim and the rope frequencies (local ones
// too for Gemma's sliding layers). Models that agree on those share one (serves()); an Engine
// refuses one built for another model (an internal error, never a silent wrong rope).
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/decoder_layer.h"

namespace sbp {

// A (n) I32 index table in the backend's memory, counted in `other`.
Buffer upload_table(Pool& pool, const std::vector<int32_t>& v);

// An index table of n entries, its values made by `values()` only where the backend computes:
// a shape-only backend never reads them, and at the lengths `plan` is asked about (10^8 tokens
// and more) building T-sized host tables that are thrown away was most of the planner's memory.
template <class Values>
Buffer index_table(const Backend& be, Pool& pool, int64_t n, Values values) {
  Buffer b = pool.allocate(Category::other, DType::I32, {n});
  if (be.computes()) upload_i32(b.view(), values());
  return b;
}

// One rope_table call: rows [first, first + rows) of a table, with one set of frequencies.
struct RopeRows {
  int64_t first = 0, rows = 0;
  RopeFrequencies freq;
  bool operator==(const RopeRows&) const = default;
};

// The calls that build the (P, h) rope table of a model. Every scaling but `dynamic` has one
// set of frequencies for all P rows. Dynamic NTK depends on the length transformers sees,
// max(position_ids) + 1 of a forward call:
//   prefill = 0 (training, scoring: the batch is one forward): the longest segment, P, for
//     every row, as transformers computes a padded batch of these sequences;
//   prefill > 0 (generation: a forward of the prompts, then one of each new position):
//     rows below max(prefill, max_position_embeddings) use the length `prefill`, and each row
//     p beyond has its own, p + 1, as transformers' generate computes a new token's rope
//     (cached keys keep the rope they were computed with).
std::vector<RopeRows> rope_rows(const ModelConfig& cfg, int64_t P, int64_t prefill);

class PreparedBatch {
 public:
  // Validates `batch` against cfg's vocabulary (InputError), then uploads its tables.
  // prefill: 0, or generation's prompt length (rope_rows above).
  PreparedBatch(const ModelConfig& cfg, Backend& be, Pool& pool, const Batch& batch,
                int64_t prefill = 0);
  PreparedBatch(PreparedBatch&&) = default;  // the buffers move, so the views in tables stay valid

  // True when a model of config `cfg` on (be, pool) would build exactly these tensors.
  bool serves(const ModelConfig& cfg, const Backend& be, const Pool& pool) const;

  int64_t size() const { return T_; }  // T, the batch's tokens
  const Tensor& tokens() const { return tokens_.view(); }    // (T) I32
  const Tensor& targets() const { return targets_.view(); }  // (T) I32, -1 = no target
  const StepTables& tables() const { return tables_; }

 private:
  int64_t T_ = 0;
  Buffer tokens_;      // (T) I32
  Buffer targets_;     // (T) I32
  Buffer positions_;   // (T) I32
  Buffer seg_start_;   // (T) I32
  Buffer rope_;        // (P, h) F32, P = the longest segment
  Buffer rope_local_;  // (P, h) F32, Gemma's sliding layers only
  StepTables tables_;
  // What the tensors were built for (serves()).
  const Backend* be_ = nullptr;
  const Pool* pool_ = nullptr;
  int64_t vocab_ = 0, head_dim_ = 0, max_len_ = 0, prefill_ = 0;
  std::vector<RopeRows> rope_rows_;      // how rope_ was built
  std::vector<float> local_inv_freq_;  // (h/2); empty without a local rope
};

}  // namespace sbp
