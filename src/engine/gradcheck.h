#pragma once
// Mode equality: one training step of an objective (SFT, DPO, GRPO or PPO) in each execution
// mode on the same random batch, every gradient compared against `base` (store + full head,
// ordinary backprop). The error measure used everywhere: max |g - g_base| over a tensor /
// max |g_base| over that tensor.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/batch.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/parameters.h"
#include "engine/objective_step.h"

namespace sbp {

// T tokens split into `segments` sequences of unequal lengths (deterministic from the seed),
// random ids; with `random_mask`, about a third of the targets are masked out.
Batch random_batch(int64_t vocab, int64_t T, int64_t segments, uint64_t seed, bool random_mask);

struct GradcheckOptions {
  std::vector<ExecConfig> modes;  // compared against base (base itself is always run first)
  uint64_t seed = 0;
  bool poison = true;  // NaN-fill fresh buffers so reads of unwritten memory show up
  ObjectiveSetup objective;
};

struct ModeResult {
  std::string mode;
  int64_t layer_chunk = 0;
  int64_t head_chunk = 0;
  double loss = 0.0;
  double loss_rel_err = 0.0;
  double max_rel_err = 0.0;                  // over every parameter
  std::map<std::string, double> per_param;   // HF name -> rel err vs base ("value:" prefix
                                             // for the PPO value model's parameters)
  int64_t peak_bytes = 0;
};

struct GradcheckResult {
  double base_loss = 0.0;
  std::map<std::string, double> base_metrics;  // the objective's metrics in base mode
  std::vector<ModeResult> modes;
  double max_rel_err = 0.0;                 // over modes and parameters, loss included
  std::map<std::string, double> per_param;  // worst over modes
};

// `batch` must have the objective's shape (random_objective_batch). The reference model (DPO,
// GRPO with beta != 0, PPO) and the PPO value model are built from `weights` and the seed; the
// step's constants (rewards, advantages, old log-probs, old values) are computed once, in base
// mode, and shared by every mode, while each mode runs its own reference-model forward.
GradcheckResult run_gradcheck(const ModelConfig& cfg, const ParameterSet& weights,
                              const Batch& batch, const GradcheckOptions& opts);

}  // namespace sbp
