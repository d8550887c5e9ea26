#pragma once
// Mode equality, the check behind `streambp gradcheck`: one training step of an objective (SFT,
// DPO, GRPO or PPO) in each execution mode on the same random batch, through the step runner
// that `train` runs (step/step_runner.h), every gradient compared against `base` (store + full
// head, ordinary backprop). The error measure used everywhere: max |g - g_base| over a tensor /
// max(max |g_base| over that tensor, kNegligibleGradient x the largest max |g_base| of the
// model).
//
// Why the floor: a gradient that is zero in exact arithmetic is computed as rounding noise, and
// noise measured against itself is O(1) whatever the modes do. At T = 8 a GRPO batch of four
// 2-token sequences scores only each prompt's single row, which attends to one key: the softmax
// is the constant 1, so every q_proj, k_proj, q_norm, k_norm gradient is exactly 0. Computed,
// it is noise of 1e-9 .. 3e-8 of the model's largest gradient, whose bits depend on the
// summation order: equal in every mode with OpenBLAS's SkylakeX kernels, but 2x apart between
// modes with its Haswell or Zen kernels ("max_rel_err 2.3" for no difference at all). Over every
// tiny preset, objective and T in 4 .. 64, such noise differed between modes by at most 9e-8 of
// the largest gradient (1.5 fp32 units u = 6e-8). The floor, 1e-2 of the largest, lets a tensor
// at or below it pass at the default tolerance 1e-4 with an error up to 1e-6 of the largest
// gradient: 17 u, so noise passes with a margin, while a mode that loses or doubles a term of a
// small but real gradient (>= 1e-5 of the largest) still fails. A tensor whose gradient is above
// the floor is judged against itself, as before.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/batch.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/parameters.h"
#include "objective/objective_setup.h"
#include "step/micro_batch.h"
#include "step/step_runner.h"

namespace sbp::cli {

// The floor of the error measure's denominator, as a fraction of the model's largest gradient.
inline constexpr double kNegligibleGradient = 1e-2;

struct GradcheckOptions {
  ObjectiveSetup objective;
  std::vector<ExecConfig> modes;  // compared against base (base itself is always run first)
  uint64_t seed = 0;
  bool poison = true;  // NaN-fill fresh buffers so reads of unwritten memory show up
  // bf16: every model's weights are the fp32 ones rounded, activations and head blocks bf16,
  // gradients fp32; base is then also run in fp32, as the yardstick of bf16 rounding.
  Precision precision = Precision::fp32;
  int64_t group_size = 4;  // GRPO completions per prompt (the batch's groups)
  // GRPO/PPO: the sampling policy's log-probs = the policy's + old_logp_noise * N(0, 1) on
  // completion rows, so that ratios leave the clip range. 0: none given (GRPO: the current
  // policy's, detached; PPO: scored at the start of the step).
  float old_logp_noise = 0.3f;
  // PPO: the old values = the value model's + value_noise * N(0, 1) (so the value clip is
  // active). 0: none given (computed at the start of the step).
  float value_noise = 0.3f;
  // The reference model = the policy's weights + reference_noise * N(0, 1) per element (so the
  // KL terms are not zero).
  float reference_noise = 0.02f;
  // LoRA (r > 0): adapters on the policy (A as PEFT draws it, B ~ N(0, lora_b_std) so that
  // every adapter gradient is nonzero); only the adapters' gradients are compared, and the
  // reference model is the base weights with the adapters off. fp32 only.
  LoraConfig lora{.r = 0};
  float lora_b_std = 0.05f;
  // Context parallelism: every mode of `modes` runs as a rank of this group (each rank over its
  // share of the rows, step/step_runner.h StepRunnerOptions::context), and the ranks' gradients
  // are summed before the comparison with base, which every rank runs on its own (a store mode
  // among `modes` is refused: engine.h set_context). Null: none.
  Communicator* context = nullptr;
};

struct ModeResult {
  std::string mode;
  int64_t layer_chunk = 0;
  int64_t head_chunk = 0;
  double loss = 0.0;
  double loss_rel_err = 0.0;
  double max_rel_err = 0.0;                 // over every parameter
  std::map<std::string, double> per_param;  // HF name -> rel err vs base ("value:" prefix for
                                            // the PPO value model's parameters)
  int64_t peak_bytes = 0;
  int64_t host_peak_bytes = 0;  // the host pool's peak (exec.offload)
  int64_t grads_bytes = 0;  // the ledger's peak of category `grads` (LoRA: adapters only)
};

struct GradcheckResult {
  // bf16 only: per parameter, base(bf16) against base(fp32) on the same batch: what bf16
  // rounding alone moves the gradient by. A mode passes when it is no farther from base(bf16).
  std::map<std::string, double> rounding;
  double base_loss = 0.0;
  std::map<std::string, double> base_metrics;  // the objective's metrics in base mode
  std::vector<ModeResult> modes;
  double max_rel_err = 0.0;                 // over modes and parameters, loss included
  std::map<std::string, double> per_param;  // worst over modes
  // Per parameter: max |g_base| / the largest max |g_base| of its model (below
  // kNegligibleGradient: judged against the floor, see the header).
  std::map<std::string, double> base_fraction;
};

// The gradcheck's micro-batch of `batch` (random_objective_batch's shape): random rewards and,
// per the noise options, the sampling log-probs and PPO's old values, computed once (base mode)
// and shared by every mode. `value`: PPO's value model (else ignored).
// Every model's weights live in `be`'s memory, where each step runs too.
MicroBatch gradcheck_micro_batch(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                                 const ParameterSet* value, const Batch& batch,
                                 const GradcheckOptions& opts, const LoraSet* lora = nullptr);

// One step of `opts.objective` in `exec` through the step runner, on fresh zeroed gradients in
// a pool of its own. Fills the policy's gradients (and the value model's) into `grads`, in the
// order of the parameter sets, and returns the step's result.
struct ModeGrads {
  StepResult result;
  std::vector<std::vector<float>> grads;  // policy tensors (LoRA: adapters), then value tensors
  int64_t peak_bytes = 0;
  int64_t host_peak_bytes = 0;  // the host pool's peak (exec.offload)
  int64_t grads_bytes = 0;  // peak of the ledger's `grads` category
};
// `lora`: the policy's adapters (then only they get gradients, in an adapter-shaped set).
ModeGrads gradcheck_step(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                         const ParameterSet* reference, const ParameterSet* value,
                         const MicroBatch& mb, const ExecConfig& exec, const GradcheckOptions& opts,
                         const LoraSet* lora = nullptr);

// `batch` must have the objective's shape (random_objective_batch). The reference model (DPO,
// GRPO with beta != 0, PPO) and the PPO value model are built from `weights` and the seed; the
// step's constants (rewards, old log-probs, old values) are made once, and every mode runs its
// own reference- and value-model forwards, as a training step does.
GradcheckResult run_gradcheck(Backend& be, const ModelConfig& cfg, const ParameterSet& weights,
                              const Batch& batch, const GradcheckOptions& opts);

}  // namespace sbp::cli
