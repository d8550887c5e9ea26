#include "train/auto_chunks.h"

#include <unistd.h>

#include <algorithm>

#include "core/error.h"
#include "core/ledger.h"
#include "plan/planner.h"
#include "plan/size_arg.h"

namespace sbp {

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

ResolvedChunks resolve_auto_chunks(const TrainConfig& c, const ModelConfig& cfg,
                                   const ExecConfig& exec, int ranks, int64_t longest_prompt) {
  ResolvedChunks r;
  int64_t total = 0;
  if (!c.memory_budget.empty()) {
    total = parse_size(c.memory_budget, c.where("memory_budget") + ": memory_budget");
  } else {
    total = physical_memory_bytes() / 10 * 9;  // leave a tenth to the system and the runtime
  }
  r.budget = total;
  PlanSetup setup;
  setup.cfg = cfg;
  setup.objective = c.objective_setup();
  setup.group_size = 2;  // the micro-batch's shape does not change its memory, only its tokens do
  // The run's step as the trainer builds it (build_models): its weights' and gradients' dtypes,
  // AdamW with fp32 master weights for bf16 weights, and `exec`'s offload (the optimizer's
  // state in host memory with offload: optimizer).
  setup.param_dtype = storage_dtype(c.precision);
  setup.grad_dtype = c.grad_dtype;
  setup.act_dtype = exec.act_dtype;
  setup.adamw = true;
  setup.master_weights = true;
  setup.budget = r.budget;
  if (!c.host_memory_budget.empty())
    setup.host_budget =
        parse_size(c.host_memory_budget, c.where("host_memory_budget") + ": host_memory_budget");
  setup.ranks = ranks;
  setup.zero = c.dist.zero;
  // Each rank of a context group holds its own rows' activations only: the group's busiest
  // rank is the one to fit (it was a whole sequence per rank before).
  setup.context_parallel = c.dist.context_parallel;
  if (longest_prompt > 0) {
    setup.generate_prompt_tokens = longest_prompt;
    setup.generate_new_tokens = c.rollout().max_completion_length;
    setup.generate_sequences = c.rollout().num_generations;
  }
  setup.lora = c.lora;  // frozen weights and fp32 adapters, as the run holds them
  const ChunkRequest req{.layer = c.layer_chunk, .head = c.head_chunk};
  const int64_t T = std::max(c.max_tokens, min_planning_tokens(c.objective, setup.group_size));
  const ChunkedPlan plan = choose_chunks(setup, exec, T, req);
  if (!plan.fits && plan.step.peak_bytes <= r.budget) {
    // The device peak fits: the offloaded bytes are what do not (a host budget is given).
    throw InputError(
        c.where("host_memory_budget") + ": a step of max_tokens " + std::to_string(c.max_tokens) +
        " tokens of objective " + objective_name(c.objective) + " in mode " + mode_name(exec) +
        " offloads " + format_bytes(plan.step.host_peak_bytes) + " to host memory (offload " +
        c.offload + "), more than the " + format_bytes(setup.host_budget) +
        " host_memory_budget (its device peak of " + format_bytes(plan.step.peak_bytes) +
        " fits memory_budget " + format_bytes(r.budget) + ")");
  }
  if (!plan.fits) {
    throw InputError(
        c.where("memory_budget") + ": a step of max_tokens " + std::to_string(c.max_tokens) +
        " tokens of objective " + objective_name(c.objective) + " in mode " + mode_name(exec) +
        " needs " + format_bytes(plan.step.peak_bytes) +
        " even with the smallest auto chunks (layer " + std::to_string(plan.layer_chunk) +
        ", head " + std::to_string(plan.head_chunk) + "), more than the " + format_bytes(r.budget) +
        " memory_budget leaves (lower max_tokens, or see `streambp plan`)");
  }
  r.layer_chunk = plan.layer_chunk;
  r.head_chunk = plan.head_chunk;
  r.planned_peak = plan.step.peak_bytes;
  return r;
}

}  // namespace sbp
