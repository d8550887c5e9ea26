#pragma once
// The interface the streamed head drives (DESIGN §2 "Objectives"). The engine computes the
// head one block of rows at a time and never shows an objective more than that block:
//
//   per-token target log-probs (LM head) or values (value head)  in
//   dL/dlogp (or dL/dvalue), optionally dL/dentropy               out
//
// An objective whose per-token gradient needs a statistic of the whole batch of the CURRENT
// pass (DPO: per-sequence sums of the policy's log-probs) asks for no-grad pre-passes: the
// engine runs the head over every block once per pre-pass (from the kept final hidden state,
// not a second forward of the layers) before the gradient pass. Everything else an objective
// needs (advantages, reference log-probs, masks, normalisers) must be constants computed
// before the step, so that dL/dlogp_t depends only on logp_t and constants: that is what lets
// every objective stream.
//
// Row convention: row t of the packed batch predicts token t+1 of its segment
// (Batch::targets); rows without a target carry logp 0 and must get dlogp 0.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/policy_terms.h"
#include "core/sequence_terms.h"
#include "core/tensor.h"

namespace sbp {

// A reference model's per-row target log-probs, as an objective that scores against them holds
// them (DPO, KTO): the host's copy, and the device vector where the scoring left them there.
struct ReferenceLogp {
  // (T) complete now, or, with `device` defined, once the backend next waits for its device
  // (Backend::download_at_next_wait): the host reads it only after a pass's values came back.
  std::shared_ptr<const std::vector<float>> host;
  // (T) F32 on the backend, or undefined: the host copy is all there is. A view: the step that
  // scored the reference owns the buffer and keeps it until the objective's gradient pass ran.
  Tensor device;
  // Values the host holds now (the device copy, when one is needed, is the engine's upload).
  static ReferenceLogp on_host(std::span<const float> logp) {
    return {std::make_shared<const std::vector<float>>(logp.begin(), logp.end()), Tensor()};
  }
};

// Which head the objective trains: the LM head (logits over the vocabulary) or a value head
// (a d -> 1 projection, "score.weight", of value models; see model/parameters.h).
enum class HeadKind { lm, value };

// One block of head rows [row_begin, row_begin + n) as the engine computed it.
struct TokenChunk {
  int64_t row_begin = 0;
  std::span<const float> logp;     // (n) LM head: log-prob of each row's target, 0 where none
  std::span<const float> entropy;  // (n) LM head: entropy of the row's softmax; empty unless
                                   //     wants_entropy()
  std::span<const float> value;    // (n) value head: the value of each row
  int64_t size() const { return static_cast<int64_t>(logp.empty() ? value.size() : logp.size()); }
};

// What the objective writes for that block (every element, zeros included).
struct TokenChunkGrads {
  std::span<float> dlogp;     // (n) dL/dlogp (LM head)
  std::span<float> dentropy;  // (n) dL/dentropy (LM head, only if wants_entropy())
  std::span<float> dvalue;    // (n) dL/dvalue (value head)
};

class Objective {
 public:
  virtual ~Objective() = default;

  virtual HeadKind head() const { return HeadKind::lm; }
  // True: the engine also computes each row's softmax entropy (for an entropy bonus or for
  // logging) and accepts dL/dentropy. Costs one more pass over each (n, V) block.
  virtual bool wants_entropy() const { return false; }

  // Number of no-grad passes over the head before the gradient pass, and their callbacks:
  // prepass() sees every block of pass p in row order, then finish_prepass(p) is called. The
  // engine reads a pass's values from the device once, after its last block, then shows them.
  virtual int prepasses() const { return 0; }
  virtual void prepass(int pass, const TokenChunk& rows) {}
  virtual void finish_prepass(int pass) {}

  // The gradient pass: called once per block, in row order. The default forwards to
  // token_grads() and leaves dL/dentropy zero, which is all an SFT-like objective needs.
  virtual void chunk_grads(const TokenChunk& in, const TokenChunkGrads& out);

  // The simple form: rows [row_begin, row_begin + n), logp (n) in, dlogp (n) out. Objectives
  // override either this or chunk_grads().
  virtual void token_grads(int64_t row_begin, std::span<const float> logp, std::span<float> dlogp);
  // Objectives whose dL/dlogp depends on no log-prob of the gradient pass, only on constants
  // and on what their pre-passes computed: SFT (linear in the log-probs), and DPO, KTO and ORPO
  // after their pre-pass. When this is true (and the objective wants no entropy), the engine
  // calls constant_grads() for each block instead of chunk_grads() and the gradient pass waits
  // for the device nowhere (docs/CUDA.md "no host wait in the head"). Without a pre-pass, the
  // loss is the pass's: the engine keeps the blocks' log-probs on the device and after the
  // pass's last block shows them to add_logp(), block by block in the same row order, with one
  // wait for the device instead of one per block; pass_sums() comes after that. With a
  // pre-pass, the loss was the pre-pass's and add_logp() is not called. The numbers are those
  // of chunk_grads(), whose default does the same: the same dlogp, the loss summed in the same
  // order.
  virtual bool grads_without_logp() const { return false; }
  virtual void constant_grads(int64_t row_begin, std::span<float> dlogp);
  virtual void add_logp(int64_t row_begin, std::span<const float> logp);

  // Policy-gradient objectives (GRPO, PPO's policy): dL/dlogp (and dL/dentropy) per token is
  // core/policy_terms.h's policy_token_grad of the row's log-prob and four per-row constants.
  // A non-null policy_terms(): the engine has policy_rows() fill each block's (n, 4) constants,
  // the backend computes the gradients (Backend::policy_token_grads: on a GPU, without the
  // host), and after the pass shows the pass's values (log-probs, entropies) to add_values(),
  // block by block in row order, for the loss and the statistics, with one read at the step's
  // end; pass_sums() comes after that. chunk_grads()' default does the same on the host: the
  // same numbers.
  virtual const PolicyTerms* policy_terms() const { return nullptr; }
  virtual void policy_rows(int64_t row_begin, std::span<float> rows) const;
  // The reference log-probs of a policy formula with a KL term (GRPO, beta != 0), where their
  // forward left them on the device: the backend reads them there, and policy_rows' reference
  // column is unused (its host copy comes only with the step's wait). Null: the rows carry them.
  virtual const ReferenceLogp* policy_reference() const { return nullptr; }
  virtual void add_values(const TokenChunk& rows);
  // The value head's counterpart (PPO's value model): value_token_grad of each row's value and
  // (n, 3) constants from value_rows(); add_values() sees the values.
  virtual const ValueTerms* value_terms() const { return nullptr; }
  virtual void value_rows(int64_t row_begin, std::span<float> rows) const;
  // The whole batch's (T, 4) policy or (T, 3) value rows where the backend already holds them
  // (PPO's, computed there from the rollout: Backend::ppo_rollout_rows), or undefined: the
  // engine then fills each block's from policy_rows() / value_rows(). Defined only for one
  // process's rows (no context group). The host's policy_rows() / value_rows() give the same
  // numbers, but may have to wait for the device first.
  virtual Tensor rows_on_device() const { return Tensor(); }

  // Sequence-level objectives (DPO, ORPO, KTO): after their one pre-pass, dL/dlogp_t is
  // core/sequence_terms.h's sequence_row_grad of the coefficient that sequence_unit gives the
  // row's sequence from the per-sequence sums. A non-null sequence_terms(): the engine leaves
  // the pre-pass's log-probs on the device and has the backend compute every row's gradient
  // from them and sequence_inputs() (Backend::sequence_token_grads), without a wait; the host
  // reads the pre-pass's log-probs at the step's end (or at once, without `later`) and only
  // then shows them to prepass() and finish_prepass(), for the loss and the statistics. The
  // numbers are those of constant_grads() after the host's pre-pass: the same functions on the
  // same sums in the same order.
  struct SequenceInputs {
    std::span<const float> weight;             // (T) m_t
    std::span<const int64_t> begin;            // (S + 1) first row of each sequence, then T
    std::span<const float> label;              // (S) KTO's labels, else empty
    const ReferenceLogp* reference = nullptr;  // DPO, KTO: the reference's log-probs
    // KTO: the KL estimate's parts on the device (Backend::sequence_token_grads' kl_parts), or
    // undefined when the estimate is known on the host (terms.kl)
    Tensor kl_parts;
  };
  virtual const SequenceTerms* sequence_terms() const { return nullptr; }
  virtual SequenceInputs sequence_inputs() const { return {}; }

  // Context parallelism (engine/context_slice.h): each rank of a context group is shown only
  // its own rows' blocks, so what an objective sums over rows is partial on each rank, and the
  // engine sums it over the group: prepass_sums(p) once every rank has seen its blocks of
  // pre-pass p, before finish_prepass(p); pass_sums() after the gradient pass. Each lists the
  // objective's row-additive accumulators (per-sequence sums, loss and metric sums); whatever
  // is computed from them must be computed after the sum. An accumulator left out shows as a
  // loss or metric that differs from one process's (tests/dist/context_parallel_test.cpp).
  virtual std::vector<std::span<double>> prepass_sums(int pass) { return {}; }
  virtual std::vector<std::span<double>> pass_sums() { return {}; }

  // This micro-batch's contribution to the step loss (complete after the gradient pass; for
  // objectives with pre-passes, after the last pre-pass).
  virtual double loss() const { return 0.0; }
  // Named statistics as TRL logs them ("loss", "rewards/chosen", "kl", ...).
  virtual std::map<std::string, double> metrics() const { return {{"loss", loss()}}; }
};

}  // namespace sbp
