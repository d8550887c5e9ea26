#pragma once
// The objectives' kernels on a backend: the per-token gradients of the policy-gradient
// objectives (GRPO, PPO), the sequence-level objectives' gradients (DPO, ORPO, KTO, SimPO),
// KTO's KL parts and PPO's rollout rows, each the objectives' own SBP_HD functions
// (objective/policy_terms.h, sequence_terms.h, ppo_rollout.h) run where the tensors live, so
// that the head's gradient pass needs nothing from the host (docs/CUDA.md "no host wait in the
// head").
//
// Why not in the Backend contract: they are the math of a few objectives, not kernels the model
// needs, and a backend has no business knowing objectives. Why not generic segmented ops (a
// segmented sum, a map over rows): the formulas run per unit in fp64 with clipping and
// label branches, and the device's bit-equality with the host's objectives
// (tests/engine/objective_parity_test.cpp) holds because both run exactly these functions.
// So this layer owns them: each call below checks its arguments (the contract and messages they
// had as Backend methods, built from backend_checks.h's helpers), then runs the kernel of the
// backend's kind (kernel_table.h) through Backend::run_extension, so that ownership, the
// memory's Access scope and the op profile are those of any backend op, and plans, ledgers and
// `bench` see the same ops as before.
#include "backend/backend.h"
#include "core/tensor.h"
#include "objective/policy_terms.h"
#include "objective/ppo_rollout.h"
#include "objective/sequence_terms.h"

namespace sbp {

// The per-token gradients of the policy-gradient objectives (GRPO, PPO's policy), written on
// the backend so that the gradient pass needs no log-prob on the host (docs/CUDA.md "no host
// wait in the head"): per row i, (dlogp[i], dentropy[i]) = policy_token_grad(logp[i], rows
// row i, terms) (objective/policy_terms.h, the objectives' own function), overwritten. rows (n, 4)
// F32: old log-prob, reference log-prob, advantage, loss weight. dentropy may be undefined.
// ref (n) F32, or undefined: where given, the reference log-probs are read from it and the
// rows' column is unused (a reference whose forward left them on the device).
// Checks: dlogp, logp F32 with numel n; rows F32 (n, 4); dentropy and ref undefined or F32
// numel n; the terms' scalars finite.
void policy_token_grads(Backend& be, const Tensor& dlogp, const Tensor& dentropy,
                        const Tensor& logp, const Tensor& rows, const PolicyTerms& terms,
                        const Tensor& ref = Tensor());
// The value head's counterpart (PPO's value model): dvalue[i] = value_token_grad(value[i],
// rows row i, terms), overwritten; rows (n, 3) F32: old value, return, loss weight.
// Checks: dvalue, value F32 with numel n; rows F32 (n, 3); terms.clip finite and >= 0.
void value_token_grads(Backend& be, const Tensor& dvalue, const Tensor& value, const Tensor& rows,
                       const ValueTerms& terms);

// The sequence-level objectives' gradients (DPO, ORPO, KTO, SimPO; objective/sequence_terms.h) for
// every row of a micro-batch at once, from its pre-pass's log-probs, so that they need not come to
// the host first (docs/CUDA.md "no host wait in the head"): per unit of
// sequences_per_unit(terms) consecutive sequences, sequence_unit_grads (the objectives' own
// functions): the sums of m_t logp_t, m_t ref_t and m_t over each sequence's rows in row
// order in fp64, the unit's coefficients, then dlogp[t] for every row, overwritten.
// dlogp, logp, weight (T) F32; ref (T) F32, or undefined where the formula has no reference
// (ORPO, SimPO); begin (S + 1) I32, the first row of each sequence, then T; label (S) F32 for KTO,
// else undefined.
// Checks: the dtypes and sizes above, S a multiple of the unit's sequences, ref defined
// exactly where the formula reads one, the terms' scalars finite with units_in_step and
// nll_rows_in_step > 0; begin's and label's values where the host can read them (the CPU
// backends: 0 = begin[0] <= ... <= begin[S] = T; labels 0 or 1). A GPU clamps the offsets
// into [0, T] instead of reading them back.
// kl_parts (KTO only, or undefined): (2 P) F32 holding the bytes of P doubles, the step's KL
// estimate's parts from kto_kl_part, which then replace terms.kl (sequence_unit_grads), so
// that the estimate need not come to the host before the gradient pass. (Tensors have no
// F64 dtype; the parts are only ever moved and read as doubles.)
void sequence_token_grads(Backend& be, const Tensor& dlogp, const Tensor& logp, const Tensor& ref,
                          const Tensor& weight, const Tensor& begin, const Tensor& label,
                          const SequenceTerms& terms, const Tensor& kl_parts = Tensor());
// One micro-batch's part of KTO's KL estimate (objective/sequence_terms.h kto_kl_part) from the
// policy's and the reference's log-probs on its KL pairs: part (2) F32 := the bytes of the
// double sum over sequences of sum m_t (logp_t - ref_t), each sequence's two sums in row
// order. logp, ref, weight (T) F32; begin (S + 1) I32 as for sequence_token_grads.
// Checks: those dtypes and sizes; part 8-byte aligned; begin's values as
// sequence_token_grads' where the host can read them.
void kto_kl_part(Backend& be, const Tensor& part, const Tensor& logp, const Tensor& ref,
                 const Tensor& weight, const Tensor& begin);
// PPO's rollout constants (objective/ppo_rollout.h; objective/gae.h computes them on the host),
// so that its advantages need not come to the host before the gradient passes: from a step's
// rollout (its micro-batches' rows one after another), the policy's rows policy_rows (T, 4)
// F32 for policy_token_grads and the value model's value_rows (T, 3) F32 for
// value_token_grads, overwritten. logp (the sampling policy's), ref, values and weight (the
// completion mask) (T) F32; begin (S + 1) I32 as for sequence_token_grads; seq (S, 3) F32 per
// sequence: score, policy and value loss weight. moments: scratch, (8 S) doubles as (16 S)
// F32 (the phases' partials).
// Checks: those dtypes and sizes, S >= 1; moments 8-byte aligned; cfg's numbers finite,
// kl_coef >= 0, gamma and lam in [0, 1]. Where the host can read them, also begin's values,
// a completion row in every sequence and at least 2 in all (the whitening's unbiased
// variance); a GPU trusts the caller for those (objective/gae.h check_ppo_rollout).
void ppo_rollout_rows(Backend& be, const Tensor& policy_rows, const Tensor& value_rows,
                      const Tensor& moments, const Tensor& logp, const Tensor& ref,
                      const Tensor& values, const Tensor& weight, const Tensor& begin,
                      const Tensor& seq, const PpoRolloutConfig& cfg);

}  // namespace sbp
