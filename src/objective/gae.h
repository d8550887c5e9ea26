#pragma once
// PPO's per-token rewards, GAE advantages and returns, with the semantics of TRL v0.23.0
// PPOTrainer.train (steps 4-6 of its rollout phase), on a packed batch:
//
//   steps of a sequence: its completion rows (target weight > 0), in order
//   kl_t       = k1: logp_t - ref_t              k3: (exp(ref_t - logp_t) - 1) - (ref_t - logp_t)
//   r_t        = -kl_coef * kl_t,  plus the sequence's score at its last step
//   (optional) r = masked_whiten(r, shift_mean = false)
//   delta_t    = r_t + gamma * V_{t+1} - V_t      (V after the last step = 0)
//   A_t        = delta_t + gamma * lambda * A_{t+1}
//   returns_t  = A_t + V_t
//   A          = masked_whiten(A)                  over every step of the batch
//
// logp are the sampling policy's log-probs (old_logp of the PPO epochs), V the value model's
// values at the same rows (Engine::values), ref the reference model's log-probs. Everything here
// is computed once per rollout batch, before any backward: PPO's losses then only see constants.
//
// Differences from TRL, by design: TRL places the score and the last value one position past
// the response's last token (its `sequence_lengths_p1` on right-padded tensors); here both
// belong to the last completion token, as the issue defines it. Masks are treated as 0/1.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/enum_names.h"
#include "objective/ppo_rollout.h"

namespace sbp {

// KlEstimator and PpoRolloutConfig live with the backends' per-sequence functions
// (objective/ppo_rollout.h); the spellings of the estimator are the config's.
inline constexpr EnumName<KlEstimator> kKlEstimatorNames[] = {{KlEstimator::k1, "k1"},
                                                              {KlEstimator::k3, "k3"}};

struct PpoAdvantages {
  std::vector<float> advantages;  // (T) whitened; 0 outside completions
  std::vector<float> returns;     // (T) 0 outside completions
  std::vector<float> rewards;     // (T) per-token rewards (after optional whitening)
  // TRL's rollout statistics (means over sequences): objective/kl (sum of kl per sequence),
  // objective/non_score_reward, objective/scores, objective/rlhf_reward.
  double mean_kl = 0, mean_non_score_reward = 0, mean_score = 0;
};

// scores (S), one per segment; logp, ref_logp, values (T). Throws InputError on shape
// mismatches, a sequence without completion rows, or fewer than 2 steps in the batch (the
// unbiased variance of the whitening needs 2).
PpoAdvantages ppo_advantages(const Batch& batch, std::span<const float> scores,
                             std::span<const float> logp, std::span<const float> ref_logp,
                             std::span<const float> values, const PpoRolloutConfig& cfg);

// One micro-batch of a rollout batch that spans several micro-batches (gradient accumulation).
struct PpoRolloutPart {
  const Batch* batch = nullptr;
  std::span<const float> scores;    // (S) of this micro-batch
  std::span<const float> logp;      // (T)
  std::span<const float> ref_logp;  // (T)
  std::span<const float> values;    // (T)
};

// The same quantities for a rollout batch split into micro-batches: rewards and GAE per
// micro-batch (sequences never span two), but every whitening over the completion rows of ALL
// parts, as TRL whitens over its whole batch — so the result does not depend on how the batch
// is split. One entry per part; each part's means (mean_kl, ...) are over its own sequences.
// ppo_advantages is this with one part.
//
// With data parallelism the batch's parts are spread over ranks: `sum_over_ranks` (given) adds
// a few doubles element-wise over every rank, in place, and the whitening statistics (count,
// sum, then the squared deviations) are those of every rank's parts together. Every rank must
// call this at the same point, with its parts (possibly none).
using SumOverRanks = std::function<void(std::span<double>)>;
std::vector<PpoAdvantages> ppo_step_advantages(std::span<const PpoRolloutPart> parts,
                                               const PpoRolloutConfig& cfg,
                                               const SumOverRanks& sum_over_ranks = nullptr);

// What every path checks before computing: one score per sequence of the batch, and a
// completion row in every sequence. Returns the batch's completion rows (the step needs 2 in
// all, for the whitening's unbiased variance). Throws InputError.
int64_t check_ppo_rollout_part(const Batch& batch, size_t scores);

// A part's rollout statistics alone (PpoAdvantages' means; its vectors empty), from its host
// values: what the step reports where the backend computed the rows (objective_kernels.h's
// ppo_rollout_rows).
PpoAdvantages ppo_rollout_means(const PpoRolloutPart& p, const PpoRolloutConfig& cfg);

// TRL's masked_whiten: (x - mean) * rsqrt(var + 1e-8) over the rows where mask is true, with
// the unbiased (Bessel-corrected) variance; shift_mean = false adds the mean back. Rows outside
// the mask are returned unchanged.
std::vector<double> masked_whiten(std::span<const double> x, const std::vector<bool>& mask,
                                  bool shift_mean);

}  // namespace sbp
