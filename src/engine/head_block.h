#pragma once
// One block of head rows [s, s + n) of the final hidden state: the final norm, then either the
// LM head (logits, log-softmax, target log-probs and, if asked, the softmax entropy) or the
// value head (a d -> 1 projection), forward and backward. The engine builds one per head chunk
// (or one for all T rows in `head: full` mode), shows its outputs to the objective, and calls
// backward() with the objective's gradients. Memory: hf (n, d) act, the (n, V) logits block
// (category `logits`; (n, 1) for a value head), a few (n) vectors, and dhf (n, d) fp32 during
// the backward: exactly one head chunk, never (T, V) in chunked mode. With final-logit
// soft-capping (Gemma) a second (n, V) block keeps the capped logits for the backward.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "model/config.h"
#include "model/parameters.h"
#include "objective/objective.h"

namespace sbp {

class HeadBlock {
 public:
  // hidden: (n, d) rows of the final hidden state (before the final norm); targets: (n) I32.
  // Runs the forward immediately. `entropy` is ignored for the value head. `to_host` false:
  // the per-row numbers stay on the device (logp()), chunk() shows none, and nothing waits.
  HeadBlock(const ModelConfig& cfg, Backend& be, Pool& pool, const ModelTensors& W, DType act,
            HeadKind kind, bool entropy, const Tensor& hidden, const Tensor& targets,
            int64_t row_begin, bool to_host = true);

  // The block as the objective sees it (spans are empty when the backend does not compute).
  TokenChunk chunk() const;
  // Allocates the gradient vectors the objective writes (dlogp [+ dentropy] or dvalue).
  TokenChunkGrads alloc_grads();
  // A block's (n, width) constants for the backend's gradients: host values (empty without
  // data), uploaded without a wait, or, where `device` is defined, the rows the backend already
  // holds (PPO's, objective_kernels.h's ppo_rollout_rows), used where they are.
  struct Rows {
    std::span<const float> host;
    Tensor device;
  };
  // Instead of alloc_grads(): the backend writes the gradients from the block's log-probs and
  // rows (n, 4) (objective_kernels.h's policy_token_grads), and backward() uses them where they
  // are. ref (n) F32 or undefined: the reference's log-probs where they are on the device.
  void policy_grads(const PolicyTerms& terms, const Rows& rows, const Tensor& ref = Tensor());
  // The value head's: objective_kernels.h's value_token_grads from the block's values and rows (n,
  // 3).
  void value_grads(const ValueTerms& terms, const Rows& rows);
  // Instead of alloc_grads(): dlogp (n) F32 computed on the device already (a sequence-level
  // objective's, objective_kernels.h's sequence_token_grads), copied there.
  void grads_from(const Tensor& dlogp);
  // Backward from the objective's gradients: weight gradients ADD into G (lm_head or score,
  // final_norm); dL/d(hidden rows) ADDS into gy (n, d) F32. Releases the block's buffers.
  void backward(const ModelTensors& G, const Tensor& gy);

  const Tensor& logits() const { return out_.view(); }   // (n, V) LM head; (n, 1) values
  const Tensor& lse() const { return lse_.view(); }      // (n)
  const Tensor& logp() const { return logp_.view(); }    // (n) F32 LM head
  const Tensor& entropy() const { return ent_.view(); }  // (n) F32 LM head, if asked
  int64_t rows() const { return n_; }
  HeadKind kind() const { return kind_; }
  bool has_entropy() const { return entropy_; }

 private:
  // For the backend's gradients: dlogp_ (n), and the block's (n, width) constants on the
  // device: `rows.device`, or the host's uploaded without a wait into rows_.
  Tensor device_rows(int width, const Rows& rows);

  const ModelConfig& cfg_;
  Backend& be_;
  Pool& pool_;
  const ModelTensors& W_;
  HeadKind kind_;
  bool entropy_;
  Tensor hidden_, targets_;
  int64_t row_begin_, n_;
  Buffer hf_;      // (n, d) act   final-normed hidden rows
  Buffer out_;     // (n, V) act   logits; (n, 1) F32 values for the value head
  Buffer capped_;  // (n, V) act  soft-capped logits, kept for the backward (Gemma soft-capping)
  Buffer lse_;     // (n) F32
  Buffer logp_;    // (n) F32
  Buffer ent_;     // (n) F32      softmax entropy (if asked)
  Buffer dlogp_;   // (n) F32      objective's dL/dlogp; dL/dvalue for the value head
  Buffer dent_;    // (n) F32      objective's dL/dentropy
  // The same per-row numbers in host memory, where the objective reads and writes them
  // (downloaded after the forward, uploaded before the backward; empty without data).
  std::vector<float> logp_host_, ent_host_, value_host_;  // (n)
  std::vector<float> dlogp_host_, dent_host_;             // (n)
  Buffer rows_;                                           // device_rows()' upload
  bool grads_on_device_ = false;                          // policy_grads(): nothing to upload
  bool entropy_grad_ = false;  // policy_grads() with a non-zero entropy coefficient
};

// The per-row numbers of one pass over the head blocks (log-probs [+ entropies] of the LM head,
// or the value head's values), gathered on the device in (rows) F32 vectors, so that the host
// reads them once after the pass instead of waiting for the device at every block
// (docs/CUDA.md "no host wait in the head"). Category `other`: 4 bytes per row and vector, in
// the ledger and in `plan`.
class HeadPassRows {
 public:
  HeadPassRows(Backend& be, Pool& pool, HeadKind kind, bool entropy, int64_t rows);
  // Copies block b's numbers into rows [at, at + b.rows()).
  void keep(const HeadBlock& b, int64_t at);

  // What the host holds once read (shared: a read at the next wait fills them later).
  struct Host {
    std::shared_ptr<std::vector<float>> logp, entropy, value;  // (rows) each, where kept
    // Rows [at, at + n) as a block of the batch's rows from row_begin (a pre-pass replays them).
    TokenChunk chunk(int64_t at, int64_t n, int64_t row_begin) const;
  };
  // The host copies, downloaded now (one wait), or queued to come with the backend's next wait
  // when `at_next_wait` (engine/deferred_reads.h); the device vectors are released either way.
  // Empty without data (the shape-only backend).
  Host read(bool at_next_wait);
  const Tensor& logp() const { return logp_.view(); }  // (rows) F32 until read()

 private:
  Backend& be_;
  Buffer logp_, entropy_, value_;  // (rows) F32
};

}  // namespace sbp
