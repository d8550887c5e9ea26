#pragma once
// Planning by shape-only execution (DESIGN §4): the peak of a step at any T, the chunk sizes a
// step should use under a budget (`auto`), and the longest T a mode can train. Every number
// comes from running the engine's own code against the meta backend (plan_step.h); nothing
// here is a formula, so the plan cannot drift from what a real step allocates.
//
// The peak of a step is non-decreasing in T for fixed chunk sizes and non-decreasing in each
// chunk size for fixed T (every buffer's size is, and the chunk loops only grow); the searches
// below rely on that (tests/plan/planner_test.cpp checks it exhaustively on small models). It
// is also close to affine in each (one buffer per T-sized tensor, one per chunk-sized one),
// which the searches exploit to need a handful of engine runs instead of log2(T).
#include <cstdint>
#include <string>

#include "engine/exec_config.h"
#include "model/config.h"
#include "model/lora.h"
#include "plan/plan_step.h"

namespace sbp {

// What is planned besides the mode: the model, storage dtypes, optimizer state and the memory
// that may be used.
struct PlanSetup {
  ModelConfig cfg;
  ObjectiveSetup objective;  // the step planned, with the reference and value models it holds
  int64_t group_size = 8;    // GRPO completions per prompt (planning_step's shape)
  DType param_dtype = DType::BF16;  // weights
  DType grad_dtype = DType::F32;    // gradient buffers (the trainer's grad_dtype)
  DType act_dtype = DType::BF16;    // activations, checkpoints, K/V (ExecConfig::act_dtype)
  bool adamw = false;               // fp32 moments
  bool master_weights = true;       // with adamw and non-F32 params: an fp32 master copy
  int64_t budget = 0;               // usable bytes (budget minus reserve); <= 0: unlimited
  // Usable host bytes for what the mode offloads (ExecConfig::offload), applied with a device
  // budget; <= 0: unlimited. A step fits when both peaks fit their budgets.
  int64_t host_budget = 0;
  int ranks = 1;                    // data parallel: the memory of one of `ranks` ranks
  int zero = 0;                     // with gradients and optimizer divided by ZeRO stage 0-2
  int context_parallel = 1;         // ranks sharing each sequence (StepMemoryOptions)
  // Online GRPO/PPO: a generation phase of generate_sequences completions of one prompt
  // (prompt + new tokens each) before the step (StepMemoryOptions::generate_*); 0: none.
  int64_t generate_prompt_tokens = 0;
  int64_t generate_new_tokens = 0;
  int64_t generate_sequences = 1;
  LoraConfig lora{.r = 0};          // r > 0: LoRA adapters on frozen weights
};

// Requested chunk sizes: > 0 fixed, 0 = auto (the largest that fits the budget).
struct ChunkRequest {
  int64_t layer = 0;
  int64_t head = 0;
};

// Bounds of the `auto` search. Below ~300 rows a bf16 GEMM on an A100/H100 is bound by reading
// its weight matrix (peak FLOP/s over memory bandwidth is ~300 FLOP per byte), and every chunk
// re-reads every weight, so smaller chunks cost time; the memory they would save is small:
// on qwen3-8b in bf16 a layer-chunk row costs ~240 KiB and a head-chunk row ~600 KiB, against
// ~320 KiB per token of T, so 512 layer rows are worth ~400 tokens of T (0.25%). The paper's
// length runs used 500 and 100.
struct AutoChunkLimits {
  int64_t min_layer = 512;
  int64_t min_head = 128;
  int64_t align = 64;  // auto sizes are multiples of this, or T itself
};

// A step of T tokens with the chunk sizes it would use.
struct ChunkedPlan {
  int64_t seq_len = 0;
  int64_t layer_chunk = 0;  // effective rows per chunk (T where the mode does not chunk)
  int64_t head_chunk = 0;
  PlannedStep step;   // planned without a budget: the peaks it needs
  bool fits = false;  // both peaks within their budgets (always true without a budget)
};

// The step at T tokens (one micro-batch of the objective's planning shape, plan_step.h) in
// `mode` with its own chunk sizes; the storage dtypes come from `setup`, no budget is applied
// (the peak is what it needs). T >= min_planning_tokens.
// With `ops`: every chunk runs and every op is recorded there (the time planner's accounting,
// plan/time_plan.h).
PlannedStep plan_at(const PlanSetup& setup, ExecConfig mode, int64_t seq_len,
                    OpProfile* ops = nullptr);

// Chunk sizes for a step of T tokens: fixed sizes as requested; auto ones the largest that fit
// `setup.budget` (the layer chunk first, then the head chunk, since the two phases never hold
// memory at the same time). Without a budget, auto means the ExecConfig defaults. If even the
// smallest auto sizes do not fit, returns them with fits = false. Knobs the mode does not use
// (layer chunks outside `stream`, head chunks with a `full` head) are not searched.
// The trainer calls this when its config says `auto`.
ChunkedPlan choose_chunks(const PlanSetup& setup, ExecConfig mode, int64_t seq_len,
                          const ChunkRequest& req, const AutoChunkLimits& limits = {});

struct MaxLenResult {
  bool fits_at_all = false;  // false: not even the smallest step fits (see explain_too_small)
  bool hit_limit = false;    // T = max_seq_len fits: the true limit may be longer
  ChunkedPlan plan;          // at the longest T, with the chunk sizes choose_chunks picks there
  int engine_runs = 0;       // shape-only steps run (T search and chunk choice)
};

// The longest T (one micro-batch) whose step fits `setup.budget` (> 0) in `mode`; with auto
// chunks a T fits if it fits with the smallest auto chunks.
MaxLenResult find_max_seq_len(const PlanSetup& setup, const ExecConfig& mode,
                              const ChunkRequest& req, const AutoChunkLimits& limits = {},
                              int64_t max_seq_len = int64_t{1} << 22);

// Why the smallest step (min_planning_tokens) does not fit the budget: the allocation that
// fails (category and size), what is allocated at that moment, and what the step would need
// in total.
std::string explain_too_small(const PlanSetup& setup, const ExecConfig& mode);

}  // namespace sbp
