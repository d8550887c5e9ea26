#pragma once
// Shape-only execution of one training step: the step runner `train` runs (step/step_runner.h),
// for any objective, against the meta backend and a non-materialising pool, with every model
// the run holds (step/model_set.h). Returns the ledger's view of the step, as a real run would
// record it, in a fraction of a second for any model size.
#include "core/batch.h"
#include "core/ledger.h"
#include "engine/exec_config.h"
#include "model/config.h"
#include "model/lora.h"
#include "backend/op_profile.h"
#include "objective/objective_setup.h"
#include "plan/counting_communicator.h"
#include "step/micro_batch.h"

namespace sbp {

struct PlannedStep {
  int64_t peak_bytes = 0;      // the whole step: generation (when planned) and training
  int64_t generation_peak = 0;  // the generation phase alone (0 when none is planned)
  MemoryBreakdown breakdown;  // at the peak
  // The host space (ExecConfig::offload): its own ledger's peak and breakdown at that peak;
  // zero when nothing is offloaded.
  int64_t host_peak_bytes = 0;
  MemoryBreakdown host_breakdown;
  int64_t flops = 0;  // the step's FLOPs, with StepMemoryOptions::count_flops (else 0)
  // With StepMemoryOptions::ops (the time planner's inputs, plan/time_model.h): bytes queued
  // to and from the host space (offload), and what the planned rank's collectives move, on the
  // data-parallel communicator and on the context-parallel group.
  int64_t offloaded_bytes = 0, prefetched_bytes = 0;
  CollectiveBytes data_parallel_bytes, context_bytes;
};

// What a step holds besides the model and the mode: the storage of weights and gradients and
// the optimizer state that lives across steps.
struct StepMemoryOptions {
  DType param_dtype = DType::F32;  // weights (and activations: the caller's ExecConfig)
  DType grad_dtype = DType::F32;   // gradient buffers
  bool adamw = false;              // fp32 first and second moments (category `optimizer`)
  // fp32 master copies of the trained weights (category `optimizer`), as mixed-precision AdamW
  // keeps when the weights are stored in bf16: updating bf16 weights directly loses every
  // update smaller than 2^-8 of the weight. Only meaningful with adamw and a non-F32 param_dtype.
  bool master_weights = true;
  int64_t budget = 0;  // > 0: an allocation past it throws OutOfMemoryError
  int64_t host_budget = 0;  // the same for the host space (offload); <= 0: unlimited
  // Data parallelism (dist/data_parallel.h): the step of one of `ranks` ranks, with gradients
  // and optimizer state (moments and master weights) divided as ZeRO stage `zero` divides them.
  // Planned for rank 0, which holds the largest slices. The real sharding code runs, against a
  // communicator that moves no data.
  int ranks = 1;
  int zero = 0;
  // Context parallelism (engine/context_slice.h): each micro-batch's rows shared by a group of
  // this many of the `ranks` ranks; planned for the group's rank that owns the most rows
  // (busiest_rank), with its own rows' checkpoints, hidden states and head blocks and every
  // row's K/V and dK/dV of one layer.
  int context_parallel = 1;
  // Online GRPO/PPO: before the training step the policy samples completions with a KV cache
  // (Engine::generate_batch, one prompt's group of generate_sequences completions at a time).
  // generate_new_tokens > 0: that batch, after a prompt of generate_prompt_tokens, is planned
  // first, through the same code, so the peak covers the generation phase too.
  int64_t generate_prompt_tokens = 0;
  int64_t generate_new_tokens = 0;
  int64_t generate_sequences = 1;
  // LoRA (model/lora.h): frozen weights (no gradients, no moments, no master copy), adapter
  // weights, gradients and moments in fp32, and no reference model (the base with the adapters
  // off). Null: full fine-tuning.
  const LoraConfig* lora = nullptr;
  // Run every chunk of every loop so that PlannedStep::flops counts the whole step (bench).
  // Without it, chunks that repeat an earlier chunk's allocations are skipped
  // (MetaBackend::Runs::ledger_only): the same peak, in work that does not grow with T.
  bool count_flops = false;
  // Non-null: every op of the step (all chunks run, as with count_flops) is recorded there by
  // family, with FLOPs, bytes and GEMM shapes: the time planner's accounting.
  OpProfile* ops = nullptr;
};

// The fewest tokens a micro-batch of the objective can have: SFT 1; otherwise 2 per sequence
// (a prompt token and a completion token) of the planning shape below.
int64_t min_planning_tokens(ObjectiveKind kind, int64_t group_size);

// The most tokens `plan` takes for one micro-batch of the objective. The shape-only step holds
// the host-side per-token tables the real step holds (token ids; with dpo, grpo and ppo also the
// loss mask, per-row weights and segments, log-probs of the policy and reference, for ppo values,
// returns and GAE terms in fp64): ObjectiveTraits::host_bytes_per_token, measured 4, 20, 32 and
// 64 bytes a token. The limit is the largest power of two that keeps them within 1 GiB and the
// planner's time at seconds; every other cost of a plan is bounded by the model (the engine's
// chunk loops run a fixed number of chunks on the planner's backend, engine.cpp). The limits
// are far past any step a device holds: 2^24 tokens of the smallest preset
// (qwen3-0.6b) need more than 1 TiB in the leanest mode.
int64_t max_planning_tokens(ObjectiveKind kind);

// The most tokens of a planned generation phase (sequences x (prompt + new tokens)): the
// planner holds their ids on the host, ~6 bytes a token with the prompts it makes.
inline constexpr int64_t kMaxPlanningGenerationTokens = int64_t{1} << 27;

// The most data-parallel ranks `plan` takes: the sharding code run for the planned rank keeps
// every rank's slice size of every tensor (what reduce-scatter and all-gather are given), 8
// bytes x ranks x tensors: at this limit 0.17 GB of host memory for qwen3-0.6b, 0.43 GB for
// gemma3-27b (measured with --zero 2 --optimizer adamw). Past any cluster that trains
// one model data-parallel only.
inline constexpr int kMaxPlanningRanks = 65536;

// One micro-batch of T tokens (token id 0: ids change no allocation) in the objective's shape:
// SFT one sequence; DPO one (chosen, rejected) pair; GRPO one group of `group_size` completions
// sharing a prompt; PPO two prompt + completion sequences. Completions are the last two thirds
// of each sequence. T >= min_planning_tokens.
StepBatches planning_step(ObjectiveKind kind, int64_t group_size, int64_t T);

// Everything allocated in the order a training run allocates it: the objective's models
// (weights, gradients, optimizer state; reference; value), master weights, then one step of
// `step` through the step runner. Throws OutOfMemoryError past the budget.
PlannedStep plan_step(const ModelConfig& cfg, const ObjectiveSetup& objective,
                      const ExecConfig& exec, const StepBatches& step,
                      const StepMemoryOptions& mem);

// plan_step for SFT on one micro-batch.
PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          const StepMemoryOptions& mem);

// Weights and gradients in `param_dtype`; with `adamw`, fp32 moments are counted too (no
// master weights). Throws OutOfMemoryError past `budget` (> 0).
PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          DType param_dtype, bool adamw, int64_t budget = 0);

}  // namespace sbp
