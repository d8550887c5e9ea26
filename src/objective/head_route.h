#pragma once
// How the streamed head runs for one objective: one value per way, naming its route and holding
// exactly that route's inputs and its completion (what the engine shows the pass's values to,
// for the loss and the statistics). Objective::route() returns one; the engine runs each
// alternative in its own file (engine/head_route_*.cpp) and nothing else picks a route.
//
// Why a variant of plain structs and not more virtual methods: each route's inputs are only
// meaningful together (a policy formula's terms, its per-row constants and where they live), so
// a struct says which inputs go with which route, and the compiler makes the engine handle every
// route. Callbacks hold the objective (`this`): a route lives no longer than its objective.
//
// The host and the device versions of a formula are one definition (core/*_terms.h, which the
// backends' formula kernels call too); host_chunks() below is each route as the host runs it,
// block by block, and the tests run it against the engine's device route for the same bits
// (tests/engine/head_route_test.cpp).
//
// Row convention (objective.h): row t of the packed batch predicts token t+1 of its segment;
// rows without a target carry logp 0 and must get dlogp 0.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <variant>
#include <vector>

#include "core/tensor.h"
#include "objective/policy_terms.h"
#include "objective/sequence_terms.h"

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

// One block of head rows [row_begin, row_begin + n) as the engine computed it.
struct TokenChunk {
  int64_t row_begin = 0;
  std::span<const float> logp;     // (n) LM head: log-prob of each row's target, 0 where none
  std::span<const float> entropy;  // (n) LM head: entropy of the row's softmax; empty unless
                                   //     the route asks for it
  std::span<const float> value;    // (n) value head: the value of each row
  int64_t size() const { return static_cast<int64_t>(logp.empty() ? value.size() : logp.size()); }
};

// What the host writes for that block (every element, zeros included).
struct TokenChunkGrads {
  std::span<float> dlogp;     // (n) dL/dlogp (LM head)
  std::span<float> dentropy;  // (n) dL/dentropy (LM head, only with entropy)
  std::span<float> dvalue;    // (n) dL/dvalue (value head)
};

// Block callbacks the routes share.
using ChunkFn = std::function<void(const TokenChunk& rows)>;
// Writes the per-row numbers of rows [row_begin, row_begin + out.size() / width).
using RowsFn = std::function<void(int64_t row_begin, std::span<float> out)>;

// The generic route: the host sees every block and writes its gradients (a test's objective,
// a caller that records the pass's log-probs, and what every other route becomes on the host,
// host_chunks()). What the context group's ranks each add up is summed between the pre-passes'
// blocks and finish_prepass (Objective::prepass_sums) and after the gradient pass
// (Objective::pass_sums).
struct HostChunks {
  bool entropy = false;  // the engine also computes each row's softmax entropy (one more pass
                         // over each (n, V) block) and takes dL/dentropy
  // No-grad passes over the head before the gradient pass (DPO's per-sequence sums): prepass
  // sees every block of pass p in row order, then finish_prepass(p) runs.
  int prepasses = 0;
  std::function<void(int pass, const TokenChunk& rows)> prepass;
  std::function<void(int pass)> finish_prepass;
  // The gradient pass, once per block in row order. It is the loss's completion too: it adds
  // the block's share of the loss as it writes the block's gradients.
  std::function<void(const TokenChunk& in, const TokenChunkGrads& out)> grads;
  // Optional, with pre-passes and without entropy: the same dL/dlogp from constants alone (the
  // loss was the pre-passes'), so that the gradient pass leaves its values on the device and
  // waits nowhere. grads must then give the same numbers.
  RowsFn constant;
};

// SFT-like: dL/dlogp from constants (linear in the log-probs), so the gradient pass waits for
// the device nowhere; the loss needs the pass's log-probs, which the engine gathers on the
// device and shows add_logp, piece by piece in row order, with one read (at the step's end,
// given DeferredReads); pass_sums() comes after that.
struct ConstantGrads {
  RowsFn grads;  // dL/dlogp of a block's rows (width 1)
  std::function<void(int64_t row_begin, std::span<const float> logp)> add_logp;  // completion
};

// Policy-gradient objectives (GRPO, PPO's policy): dL/dlogp (and dL/dentropy) of each row is
// objective/policy_terms.h's policy_token_grad of its log-prob and (n, 4) constants; the backend
// computes them (objective_kernels.h's policy_token_grads: on a GPU, without the host). After the
// pass the engine shows the pass's values (log-probs, entropies) to add_values, piece by piece in
// row order, with one read; pass_sums() comes after that.
struct PolicyFormula {
  PolicyTerms terms;
  bool entropy = false;  // as HostChunks::entropy
  RowsFn rows;           // a block's (n, kPolicyRowWidth) constants
  // (T, 4): the whole batch's rows where the backend already holds them (PPO's,
  // objective_kernels.h's ppo_rollout_rows), or undefined: the engine fills each block's from
  // `rows` (which may wait for the device first). Defined only for one process's rows.
  Tensor rows_on_device;
  // The reference log-probs where their forward left them on the device (GRPO, beta != 0):
  // the backend reads them there and the rows' reference column is unused. Null: the rows
  // carry them.
  const ReferenceLogp* reference = nullptr;
  ChunkFn add_values;  // completion
};

// The value head's counterpart (PPO's value model): value_token_grad of each row's value and
// (n, 3) constants.
struct ValueFormula {
  ValueTerms terms;
  RowsFn rows;            // a block's (n, kValueRowWidth) constants
  Tensor rows_on_device;  // (T, 3), as PolicyFormula's
  ChunkFn add_values;     // completion
};

// Sequence-level objectives (DPO, ORPO, KTO): after one pre-pass, dL/dlogp_t is
// objective/sequence_terms.h's sequence_row_grad of the coefficient sequence_unit gives the row's
// sequence from the per-sequence sums. On one process the pre-pass's log-probs stay on the
// device and the backend computes every row's gradient from them and `inputs`
// (objective_kernels.h's sequence_token_grads) without a wait; the host reads the pre-pass after
// (at the step's end, given DeferredReads) and shows it to add_prepass, then finish: the
// completion. With a context group the per-sequence sums span the ranks, which the host sums, so
// the engine takes the host's fallback instead: host_chunks() of this route (add_prepass,
// Objective::prepass_sums, finish, then host_grads). The same functions on the same sums in
// the same order: the same numbers.
struct SequenceInputs {
  std::span<const float> weight;             // (T) m_t
  std::span<const int64_t> begin;            // (S + 1) first row of each sequence, then T
  std::span<const float> label;              // (S) KTO's labels, else empty
  const ReferenceLogp* reference = nullptr;  // DPO, KTO: the reference's log-probs
  // KTO: the KL estimate's parts on the device (objective_kernels.h's sequence_token_grads'
  // kl_parts), or undefined when the estimate is known on the host (terms.kl)
  Tensor kl_parts;
};
struct SequenceRoute {
  SequenceTerms terms;
  SequenceInputs inputs;
  ChunkFn add_prepass;           // completion: the pre-pass's rows, in row order
  std::function<void()> finish;  // then once
  RowsFn host_grads;             // the host's dL/dlogp after finish (the fallback's)
};

using HeadRoute =
    std::variant<HostChunks, ConstantGrads, PolicyFormula, ValueFormula, SequenceRoute>;

// Every route as the host runs it, block by block: the same formulas (core/*_terms.h) on the
// same values, so the same numbers as the engine's device route. A sequence route keeps its
// `constant` gradients (its fallback waits nowhere in the gradient pass either).
HostChunks host_chunks(HeadRoute route);

}  // namespace sbp
