#include "plan/plan_step.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "core/pool.h"
#include "dist/communicator.h"
#include "engine/context_slice.h"
#include "objective/sequence_rows.h"
#include "optim/shard_range.h"
#include "step/model_set.h"
#include "step/step_runner.h"

namespace sbp {

int64_t min_planning_tokens(ObjectiveKind kind, int64_t group_size) {
  const ObjectiveTraits& t = objective_traits(kind);
  return t.completions ? 2 * plan_sequences_of(t, group_size) : 1;
}

int64_t max_planning_tokens(ObjectiveKind kind) {
  // The largest power of two whose tables stay within 1 GiB: 2^28 tokens for sft (4 bytes a
  // token), 2^25 for dpo and grpo, 2^24 for ppo.
  const int64_t per_token = objective_traits(kind).host_bytes_per_token;
  const auto within = static_cast<uint64_t>((int64_t{1} << 30) / per_token);
  return static_cast<int64_t>(std::bit_floor(within));
}

StepBatches planning_step(ObjectiveKind kind, int64_t group_size, int64_t T) {
  SBP_CHECK(T >= min_planning_tokens(kind, group_size), "planning_step: too few tokens");
  const ObjectiveTraits& t = objective_traits(kind);
  MicroBatch mb;
  const int64_t S = plan_sequences_of(t, group_size);
  if (!t.completions) {
    mb.batch.tokens.assign(static_cast<size_t>(T), 0);
    mb.batch.seq_lens = {T};
  } else {
    // S sequences sharing a prompt of a third of the shortest (>= 1 token, >= 1 completion).
    const int64_t len = T / S, prompt = std::max<int64_t>(1, len / 3);
    std::vector<PromptCompletion> seqs(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) {
      const int64_t n = len + (s < T % S ? 1 : 0);
      seqs[static_cast<size_t>(s)].prompt.assign(static_cast<size_t>(prompt), 0);
      seqs[static_cast<size_t>(s)].completion.assign(static_cast<size_t>(n - prompt), 0);
    }
    mb.batch = prompt_completion_batch(seqs);
  }
  if (t.rollouts) mb.rewards.assign(static_cast<size_t>(S), 0.0f);
  if (t.sequence_labels)  // desirable and undesirable alike: labels change no allocation
    for (int64_t s = 0; s < S; ++s) mb.rewards.push_back(static_cast<float>(s % 2));
  if (t.group == SequenceGroup::configured) mb.group_size = S;
  // Moved, not listed: a braced list would copy the (T) token table once more.
  std::vector<MicroBatch> micro;
  micro.push_back(std::move(mb));
  return StepBatches::whole(std::move(micro));
}

PlannedStep plan_step(const ModelConfig& cfg, const ObjectiveSetup& objective,
                      const ExecConfig& exec, const StepBatches& step,
                      const StepMemoryOptions& mem) {
  Ledger ledger(mem.budget), host_ledger(mem.host_budget);
  host_ledger.set_space("host");
  // Ledger only (the skipped chunks would repeat an earlier chunk's allocations), unless bench
  // wants the FLOPs of every chunk.
  const bool all_work = mem.count_flops || mem.ops != nullptr;
  const std::unique_ptr<Backend> shape_only = make_shape_only_backend(all_work);
  Backend& be = *shape_only;
  Pool pool(ledger, be);
  Pool host_pool(host_ledger, be.host_memory());
  if (exec.offload.any()) pool.set_host(&host_pool);
  CountingCommunicator comm(0, mem.ranks);
  const AdamWConfig optim;
  ModelSet models(objective, cfg, pool, be,
                  ModelSetOptions{.param_dtype = mem.param_dtype,
                                  .grad_dtype = mem.grad_dtype,
                                  .optim = mem.adamw ? &optim : nullptr,
                                  .master_weights = mem.master_weights,
                                  .comm = &comm,
                                  .zero = mem.zero,
                                  .lora = mem.lora,
                                  .offload_optimizer = exec.offload.optimizer});
  PlannedStep p;
  // The step's ops only: setting up the models (weights, zeroed gradients) is not a step's work.
  be.set_profile(mem.ops);
  if (mem.generate_new_tokens > 0) {
    // The meta backend's logits read as zeros: greedy picks token 0, which stops nothing, so
    // every new token is planned.
    Engine policy(cfg, models.policy_weights(), be, pool, exec);
    if (models.has_lora()) policy.set_lora(&models.lora_weights(), nullptr);
    GenerationConfig g;
    g.max_new_tokens = mem.generate_new_tokens;
    g.sampling.greedy = true;
    const size_t B = static_cast<size_t>(std::max<int64_t>(mem.generate_sequences, 1));
    const std::vector<std::vector<int32_t>> prompts(
        B, std::vector<int32_t>(static_cast<size_t>(std::max<int64_t>(mem.generate_prompt_tokens, 1)), 0));
    std::vector<Rng> rngs(B, Rng(0));
    policy.generate_batch(prompts, g, rngs);
    p.generation_peak = ledger.peak();
  }
  // Context parallelism: the group's busiest rank (the first micro-batch's rows).
  const int64_t rows = step.micro.empty() ? 0 : step.micro.front().batch.size();
  CountingCommunicator group(busiest_rank(rows, mem.context_parallel), mem.context_parallel);
  StepRunner(objective, models.views(), be, pool, exec, comm,
             StepRunnerOptions{.context = mem.context_parallel > 1 ? &group : nullptr})
      .run(step);
  p.peak_bytes = ledger.peak();
  p.breakdown = ledger.peak_breakdown();
  p.host_peak_bytes = host_ledger.peak();
  p.host_breakdown = host_ledger.peak_breakdown();
  p.flops = all_work ? be.flops() : 0;
  p.offloaded_bytes = be.offloaded_bytes();
  p.prefetched_bytes = be.prefetched_bytes();
  p.data_parallel_bytes = comm.bytes();
  p.context_bytes = group.bytes();
  be.set_profile(nullptr);
  return p;
}

PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          const StepMemoryOptions& mem) {
  MicroBatch mb;
  mb.batch = batch;
  return plan_step(cfg, ObjectiveSetup{}, exec, StepBatches::whole({std::move(mb)}), mem);
}

PlannedStep plan_sft_step(const ModelConfig& cfg, const ExecConfig& exec, const Batch& batch,
                          DType param_dtype, bool adamw, int64_t budget) {
  return plan_sft_step(
      cfg, exec, batch,
      StepMemoryOptions{.param_dtype = param_dtype,
                        .grad_dtype = param_dtype,
                        .adamw = adamw,
                        .master_weights = false,
                        .budget = budget});
}

}  // namespace sbp
