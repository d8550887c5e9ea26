#pragma once
// One training step of any objective, end to end, for the tools that need "a step of objective
// X on this batch" (gradcheck, bench; the trainer does the same with its own data):
//
//   sft   policy.forward_backward(SftObjective)
//   dpo   reference forward (target_logp)            -> DpoObjective (two-pass head)
//   grpo  [reference forward if beta != 0]           -> GrpoObjective
//   ppo   rollout constants (old logp, values, ref logp, scores -> GAE) computed before the step,
//         then policy.forward_backward(PpoPolicyObjective) and
//         value.forward_backward(PpoValueObjective)
//
// The reference model always runs before the policy's step, so its working set is gone when
// the policy's checkpoints are allocated; the ledger's peak is the larger of the two phases.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/pool.h"
#include "engine/batch.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/parameters.h"
#include "objective/dpo.h"
#include "objective/gae.h"
#include "objective/group_advantages.h"
#include "objective/grpo.h"
#include "objective/ppo.h"

namespace sbp {

enum class ObjectiveKind { sft, dpo, grpo, ppo };
ObjectiveKind parse_objective(const std::string& name);  // "sft" | "dpo" | "grpo" | "ppo"
const char* objective_name(ObjectiveKind k);

// Everything a random step of an objective needs besides the models and the batch.
struct ObjectiveSetup {
  ObjectiveKind kind = ObjectiveKind::sft;
  DpoConfig dpo;
  GrpoConfig grpo;
  ScaleRewards scale_rewards = ScaleRewards::group;
  int64_t group_size = 4;  // GRPO completions per prompt
  PpoConfig ppo;
  PpoRolloutConfig rollout;
  // GRPO/PPO old log-probs = the policy's + old_logp_noise * N(0, 1) on completion rows (so
  // that ratios leave the clip range); 0 = the current policy's (GRPO: detached, no rollout).
  float old_logp_noise = 0.3f;
  // PPO old values = the value model's + value_noise * N(0, 1) (so the value clip is active).
  float value_noise = 0.3f;
  // A reference model built by make_reference_weights = the policy's weights +
  // reference_noise * N(0, 1) per element (so KL terms are not zero).
  float reference_noise = 0.02f;

  bool needs_reference() const;
  bool needs_value_model() const { return kind == ObjectiveKind::ppo; }
};

// The objective as a command line names it (streambp gradcheck / bench --objective ...).
struct ObjectiveArgs {
  std::string objective = "sft";      // sft | dpo | grpo | ppo
  std::string dpo_loss = "sigmoid";   // sigmoid | hinge | ipo
  double label_smoothing = 0.0;
  std::string grpo_loss = "dapo";     // grpo | bnpo | dr_grpo | dapo
  std::string scale_rewards = "group";
  double beta = -1.0;  // DPO beta / GRPO KL coefficient / PPO kl_coef; < 0: 0.1 / 0.04 / 0.05
  int64_t group_size = 4;
  double entropy_coef = 0.0;
  // Parses and validates (InputError naming the flag).
  ObjectiveSetup setup() const;
  std::string describe() const;  // "dpo (sigmoid, beta 0.1)"
};

// A random batch of the objective's shape: SFT as random_batch (gradcheck.h); DPO (chosen,
// rejected) pairs that share a prompt; GRPO groups of group_size completions that share a
// prompt; PPO prompt + completion sequences. Loss masks mark the completions; every segment
// has >= 2 tokens and at least one scored row. `segments` is rounded to what the shape needs
// (even for DPO, a multiple of the group size for GRPO, at most T / 2).
Batch random_objective_batch(const ObjectiveSetup& setup, int64_t vocab, int64_t T,
                             int64_t segments, uint64_t seed);

// The reference model of a test or benchmark: a copy of `policy` (+ noise), category weights.
ParameterSet make_reference_weights(const ModelConfig& cfg, const ParameterSet& policy,
                                    Pool& pool, float noise, uint64_t seed);

// The models of a step. reference: required by needs_reference(); value: by PPO.
struct ObjectiveModels {
  const ModelConfig& cfg;
  const ParameterSet& policy;
  const ParameterSet* reference = nullptr;
  const ParameterSet* value = nullptr;
};

// Constants of the batch, fixed before the step (and shared by every mode of a gradcheck).
struct StepConstants {
  std::vector<float> rewards;      // grpo (S) rewards; ppo (S) scores
  std::vector<float> advantages;   // grpo (S); ppo (T)
  std::vector<float> old_logp;     // grpo (T) or empty; ppo (T)
  std::vector<float> old_values;   // ppo (T)
  std::vector<float> returns;      // ppo (T)
  std::map<std::string, double> rollout_metrics;  // ppo: objective/kl, objective/scores, ...
};

// Random rewards / scores from the seed, and the rollout quantities (policy log-probs, value
// model values, reference log-probs; forward only, with `exec`'s chunk sizes) with the noise
// of `setup`.
StepConstants make_step_constants(const ObjectiveSetup& setup, const ObjectiveModels& models,
                                  const Batch& batch, Backend& be, Pool& pool,
                                  const ExecConfig& exec, uint64_t seed);

struct StepOutcome {
  double loss = 0.0;                       // policy loss (+ value loss for PPO)
  std::map<std::string, double> metrics;   // the objective's (both PPO objectives' merged)
};

// One step: reference forward if needed, then the forward_backward(s). Gradients ADD into
// policy_grads (and, for PPO, value_grads).
StepOutcome run_objective_step(const ObjectiveSetup& setup, const ObjectiveModels& models,
                               const StepConstants& constants, const Batch& batch, Backend& be,
                               Pool& pool, const ExecConfig& exec,
                               const ParameterSet& policy_grads,
                               const ParameterSet* value_grads = nullptr);

}  // namespace sbp
