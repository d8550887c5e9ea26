#include "train/auto_chunks.h"

#include <unistd.h>

#include "core/error.h"
#include "core/ledger.h"
#include "model/parameters.h"
#include "plan/planner.h"
#include "plan/size_arg.h"
#include "train/step_objective.h"

namespace sbp {

namespace {

int64_t parameter_count(const ModelConfig& cfg, ModelHead head) {
  int64_t n = 0;
  for (const ParamSpec& s : parameter_specs(cfg, head)) n += s.shape.numel();
  return n;
}

}  // namespace

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

ResolvedChunks resolve_auto_chunks(const TrainConfig& c, const ModelConfig& cfg, const ExecConfig& exec,
                                   int ranks) {
  ResolvedChunks r;
  int64_t total = 0;
  if (!c.memory_budget.empty()) {
    total = parse_size(c.memory_budget, c.where("memory_budget") + ": memory_budget");
  } else {
    total = physical_memory_bytes() / 10 * 9;  // leave a tenth to the system and the runtime
  }
  // The models the objective holds beside the policy, all fp32 on this trainer.
  if (needs_reference_model(c)) r.other_models += 4 * parameter_count(cfg, ModelHead::lm);
  if (c.objective == "ppo") r.other_models += 4 * 4 * parameter_count(cfg, ModelHead::value);  // weights, grads, m, v
  r.budget = total - r.other_models;
  if (r.budget <= 0) {
    throw InputError(c.where("memory_budget") + ": memory_budget " + format_bytes(total) + " cannot even hold the " +
                     format_bytes(r.other_models) + " of the reference/value models of objective " + c.objective);
  }
  PlanSetup setup;
  setup.cfg = cfg;
  setup.param_dtype = DType::F32;
  setup.act_dtype = exec.act_dtype;
  setup.adamw = true;
  setup.master_weights = false;
  setup.budget = r.budget;
  setup.ranks = ranks;
  setup.zero = c.dist.zero;
  const ChunkRequest req{.layer = c.layer_chunk, .head = c.head_chunk};
  const ChunkedPlan plan = choose_chunks(setup, exec, c.max_tokens, req);
  if (!plan.fits) {
    throw InputError(c.where("memory_budget") + ": a step of max_tokens " + std::to_string(c.max_tokens) +
                     " tokens in mode " + mode_name(exec) + " needs " + format_bytes(plan.step.peak_bytes) +
                     " even with the smallest auto chunks (layer " + std::to_string(plan.layer_chunk) + ", head " +
                     std::to_string(plan.head_chunk) + "), more than the " + format_bytes(r.budget) +
                     " memory_budget leaves (lower max_tokens, or see `streambp plan`)");
  }
  r.layer_chunk = plan.layer_chunk;
  r.head_chunk = plan.head_chunk;
  r.planned_peak = plan.step.peak_bytes;
  return r;
}

}  // namespace sbp
