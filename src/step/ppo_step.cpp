// StepRunner's PPO step (step_runner.h): the rollout constants of every micro-batch before any
// backward, GAE whitened over the step, then the policy's and the value model's updates.
//
// One process without a context group keeps the rollout on the device: every micro-batch's
// three no-grad forwards (old log-probs, reference log-probs, old values) leave their rows in
// step-wide vectors, where the backend computes the step's rewards, GAE and whitenings and
// writes the two models' per-row constants (objective_kernels.h's ppo_rollout_rows), which the
// gradient passes read there. The host reads the same rows back with the step's one wait, at its
// end, for the losses and statistics. With several ranks the whitening's statistics are every
// rank's, summed on the host (objective/gae.h ppo_step_advantages): one wait before the
// gradient passes, for all the micro-batches' forwards at once.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "objective/gae.h"
#include "objective/ppo.h"
#include "objective/sequence_rows.h"
#include "objective_kernels/objective_kernels.h"
#include "step/micro_batch_prep.h"
#include "step/objective_steps.h"
#include "step/step_context.h"
#include "step/step_runner.h"
#include "step/weighted_means.h"

namespace sbp {

namespace {

// What the updates take from the rollout, per micro-batch.
struct RolloutConstants {
  PpoRollout policy, value;
  // The rollout statistics (PpoAdvantages' means), asked for at the step's end.
  std::function<PpoAdvantages()> means;
};

// The host's copies of a micro-batch's three rollout vectors, complete after the backend's next
// wait (or given with the micro-batch).
struct RolloutOnHost {
  std::shared_ptr<const std::vector<float>> old_logp, ref_logp, old_values;  // (T)
};

// Columns a and b of rows [off, off + T) of host rows (n, width), as (T) vectors.
PpoRowConstants columns(const std::vector<float>& rows, int width, int64_t off, int64_t T, int a,
                        int b) {
  auto first = std::make_shared<std::vector<float>>(static_cast<size_t>(T), 0.0f);
  auto second = std::make_shared<std::vector<float>>(static_cast<size_t>(T), 0.0f);
  if (!rows.empty())
    for (int64_t t = 0; t < T; ++t) {
      (*first)[static_cast<size_t>(t)] = rows[static_cast<size_t>((off + t) * width + a)];
      (*second)[static_cast<size_t>(t)] = rows[static_cast<size_t>((off + t) * width + b)];
    }
  return {std::move(first), std::move(second)};
}

std::shared_ptr<const std::vector<float>> given(const std::vector<float>& v) {
  return std::make_shared<const std::vector<float>>(v);
}

// The rollout on the device (one process): returns the constants of each micro-batch, their
// rows views of *rows (policy (T, 4), value (T, 3) over the step), which the caller keeps until
// the gradient passes are queued.
std::vector<RolloutConstants> rollout_on_device(StepContext& ctx, const StepBatches& step,
                                                std::vector<MicroBatchPrep>& preps,
                                                std::pair<Buffer, Buffer>& rows) {
  Backend& be = ctx.backend();
  Pool& pool = ctx.pool();
  const bool computes = be.computes();
  const size_t P = step.micro.size();
  PpoConfig ppo = ctx.objective().ppo;
  ppo.grad_accum_steps = step.step_micro_batches;
  // The step's rows, micro-batch after micro-batch: offsets, weights, sequence offsets and the
  // sequences' constants (score and the two loss weights of their micro-batch).
  std::vector<int64_t> off = {0};
  std::vector<float> weight;         // (T)
  std::vector<int64_t> begin = {0};  // (S + 1)
  std::vector<float> seq;            // (S, 3)
  int64_t steps = 0;
  for (const MicroBatch& mb : step.micro) {
    const double n = static_cast<double>(check_ppo_rollout_part(mb.batch, mb.rewards.size()));
    steps += static_cast<int64_t>(n);
    const SequenceRows sr(mb.batch);
    weight.insert(weight.end(), sr.weight.begin(), sr.weight.end());
    for (int64_t s = 0; s < sr.num_sequences(); ++s) {
      begin.push_back(off.back() + sr.begin[static_cast<size_t>(s) + 1]);
      seq.insert(seq.end(), {mb.rewards[static_cast<size_t>(s)], ppo_policy_weight(n, ppo),
                             ppo_value_weight(n, ppo)});
    }
    off.push_back(off.back() + sr.num_rows());
  }
  if (steps < 2) throw InputError("whitening needs at least 2 completion tokens in the batch");
  const int64_t T = off.back(), S = static_cast<int64_t>(begin.size()) - 1;
  Buffer logp = pool.allocate(Category::other, DType::F32, {T});    // (T) the sampling policy's
  Buffer ref = pool.allocate(Category::other, DType::F32, {T});     // (T)
  Buffer values = pool.allocate(Category::other, DType::F32, {T});  // (T) old values
  std::vector<RolloutOnHost> host(P);
  const ModelConfig& policy_cfg = *ctx.models().policy.model.cfg;
  const ModelConfig& value_cfg = *ctx.models().value.model.cfg;
  for (size_t i = 0; i < P; ++i) {
    const MicroBatch& mb = step.micro[i];
    const int64_t a = off[i], b = off[i + 1];
    MicroBatchPrep& prep = preps.emplace_back(mb.batch, be, pool);
    Engine policy = ctx.policy_engine(), reference = ctx.reference_engine();
    Buffer dev;  // (T_i) a forward's rows, copied into the step's vector
    if (mb.old_logp.empty()) {
      host[i].old_logp = ctx.logp_at_next_wait(policy, prep.for_model(policy_cfg), &dev).host;
      be.copy(logp.view().slice_rows(a, b), dev.view());
    } else {
      host[i].old_logp = given(mb.old_logp);
      if (computes) upload_f32(logp.view().slice_rows(a, b), mb.old_logp);
    }
    host[i].ref_logp =
        ctx.logp_at_next_wait(reference, prep.for_model(ctx.reference_config()), &dev).host;
    be.copy(ref.view().slice_rows(a, b), dev.view());
    if (mb.old_values.empty()) {
      Engine value = ctx.value_engine();
      host[i].old_values = ctx.values_at_next_wait(value, prep.for_model(value_cfg), &dev);
      be.copy(values.view().slice_rows(a, b), dev.view());
    } else {
      host[i].old_values = given(mb.old_values);
      if (computes) upload_f32(values.view().slice_rows(a, b), mb.old_values);
    }
  }
  const Buffer w = pool.allocate(Category::other, DType::F32, {T});           // (T)
  const Buffer starts = pool.allocate(Category::other, DType::I32, {S + 1});  // (S + 1)
  const Buffer sequences = pool.allocate(Category::other, DType::F32, {S, kPpoSequenceWidth});
  const Buffer moments = pool.allocate(Category::other, DType::F32, {16 * S});  // (8 S) doubles
  if (computes) {
    upload_f32(w.view(), weight);
    upload_i32(starts.view(), offsets_i32(begin));
    upload_f32(sequences.view(), seq);
  }
  rows.first = pool.allocate(Category::other, DType::F32, {T, kPolicyRowWidth});  // (T, 4)
  rows.second = pool.allocate(Category::other, DType::F32, {T, kValueRowWidth});  // (T, 3)
  ppo_rollout_rows(be, rows.first.view(), rows.second.view(), moments.view(), logp.view(),
                   ref.view(), values.view(), w.view(), starts.view(), sequences.view(),
                   ctx.objective().rollout);
  // The rows' host copies come with the step's wait; the objectives read them only then.
  std::shared_ptr<const std::vector<float>> policy_host, value_host;
  if (computes) {
    policy_host = be.download_at_next_wait(rows.first.view());
    value_host = be.download_at_next_wait(rows.second.view());
  } else {
    policy_host = value_host = std::make_shared<const std::vector<float>>();
  }
  std::vector<RolloutConstants> out(P);
  const PpoRolloutConfig cfg = ctx.objective().rollout;
  for (size_t i = 0; i < P; ++i) {
    const int64_t a = off[i], T_i = off[i + 1] - off[i];
    out[i].policy = {.host =
                         [policy_host, &be, a, T_i] {
                           be.finish_reads();  // already done at the step's end: no wait then
                           return columns(*policy_host, kPolicyRowWidth, a, T_i, kAdvantage,
                                          kOldLogp);
                         },
                     .device = rows.first.view().slice_rows(a, a + T_i)};
    out[i].value = {.host =
                        [value_host, &be, a, T_i] {
                          be.finish_reads();
                          return columns(*value_host, kValueRowWidth, a, T_i, kReturn, kOldValue);
                        },
                    .device = rows.second.view().slice_rows(a, a + T_i)};
    // A copy of the batch: the step's batches may be gone by the step's end.
    out[i].means = [h = host[i], batch = std::make_shared<const Batch>(step.micro[i].batch),
                    scores = given(step.micro[i].rewards), cfg, &be] {
      be.finish_reads();
      return ppo_rollout_means({batch.get(), *scores, *h.old_logp, *h.ref_logp, *h.old_values},
                               cfg);
    };
  }
  return out;
}

// The rollout on the host: one wait for every micro-batch's forwards, then
// ppo_step_advantages, its whitening summed over the ranks.
std::vector<RolloutConstants> rollout_on_host(StepContext& ctx, const StepBatches& step,
                                              std::vector<MicroBatchPrep>& preps) {
  Communicator& comm = ctx.comm();
  const ModelConfig& policy_cfg = *ctx.models().policy.model.cfg;
  const ModelConfig& value_cfg = *ctx.models().value.model.cfg;
  std::vector<RolloutOnHost> host(step.micro.size());
  for (size_t i = 0; i < step.micro.size(); ++i) {
    const MicroBatch& mb = step.micro[i];
    MicroBatchPrep& prep = preps.emplace_back(mb.batch, ctx.backend(), ctx.pool());
    Engine policy = ctx.policy_engine(), reference = ctx.reference_engine();
    host[i].old_logp = mb.old_logp.empty()
                           ? ctx.logp_at_next_wait(policy, prep.for_model(policy_cfg)).host
                           : given(mb.old_logp);
    host[i].ref_logp =
        ctx.logp_at_next_wait(reference, prep.for_model(ctx.reference_config())).host;
    if (mb.old_values.empty()) {
      Engine value = ctx.value_engine();
      host[i].old_values = ctx.values_at_next_wait(value, prep.for_model(value_cfg));
    } else {
      host[i].old_values = given(mb.old_values);
    }
  }
  ctx.backend().finish_reads();  // the rollout's one wait
  std::vector<PpoRolloutPart> parts;
  for (size_t i = 0; i < step.micro.size(); ++i)
    parts.push_back({&step.micro[i].batch, step.micro[i].rewards, *host[i].old_logp,
                     *host[i].ref_logp, *host[i].old_values});
  SumOverRanks sum_over_ranks;  // whitening over the whole step: statistics summed over ranks
  if (comm.size() > 1) sum_over_ranks = [&comm](std::span<double> x) { comm.sum(x); };
  const std::vector<PpoAdvantages> adv =
      ppo_step_advantages(parts, ctx.objective().rollout, sum_over_ranks);
  std::vector<RolloutConstants> out(step.micro.size());
  for (size_t i = 0; i < step.micro.size(); ++i) {
    out[i].policy = PpoRollout::on_host(adv[i].advantages, *host[i].old_logp);
    out[i].value = PpoRollout::on_host(adv[i].returns, *host[i].old_values);
    PpoAdvantages means = adv[i];
    means.advantages.clear(), means.returns.clear(), means.rewards.clear();
    out[i].means = [means] { return means; };
  }
  return out;
}

void run_ppo(StepContext& ctx, const StepBatches& step, StepResult& r) {
  Communicator& comm = ctx.comm();
  // Each micro-batch prepared once for its (up to) five passes: the rollout's three and the two
  // updates below. Its tables stay until its updates are done.
  std::vector<MicroBatchPrep> preps;
  preps.reserve(step.micro.size());
  // The rollout constants of every micro-batch, before any backward: the weights they are
  // computed from are the ones the step starts with.
  std::pair<Buffer, Buffer> rows;  // the device path's (T, 4) and (T, 3) rows
  const bool on_device = comm.size() == 1 && !ctx.context_parallel() && !step.micro.empty();
  const std::vector<RolloutConstants> rollout = on_device
                                                    ? rollout_on_device(ctx, step, preps, rows)
                                                    : rollout_on_host(ctx, step, preps);

  // One update per micro-batch; each term is already divided by ga, so the losses add up to the
  // mean over micro-batches of TRL's pg_loss + vf_coef * vf_loss.
  PpoConfig cfg = ctx.objective().ppo;
  cfg.grad_accum_steps = step.step_micro_batches;
  // The objectives are kept to the step's end: their losses and statistics add the log-probs
  // that the engine reads there (objective.h policy_terms), after the step's wait. The step's
  // statistics merge each micro-batch's two models' (below), so they are only kept alive.
  struct Kept {
    const PpoPolicyObjective* policy = nullptr;
    const PpoValueObjective* value = nullptr;
    std::function<PpoAdvantages()> means;
    double sequences = 0;
  };
  auto kept = std::make_shared<std::vector<Kept>>();
  ctx.for_each_slot(step, [&](size_t i, int64_t slot) {
    const Batch& b = step.micro[i].batch;
    Kept& k = kept->emplace_back();
    PpoPolicyObjective& policy =
        ctx.keep_alive(std::make_unique<PpoPolicyObjective>(b, rollout[i].policy, cfg));
    ctx.backward_slot(ctx.models().policy, preps[i], policy, slot, ctx.logp_slot(r, i));
    PpoValueObjective& value =
        ctx.keep_alive(std::make_unique<PpoValueObjective>(b, rollout[i].value, cfg));
    ctx.backward_slot(ctx.models().value, preps[i], value, slot, nullptr);
    k.policy = &policy;
    k.value = &value;
    preps[i].release();  // its passes are done
    k.means = rollout[i].means;
    k.sequences = static_cast<double>(b.seq_lens.size());
  });
  ctx.at_finish([kept, &comm](StepResult& result) {
    WeightedMeans stats;    // TRL logs the mean of its per-micro-batch statistics
    WeightedMeans rollout;  // the rollout's statistics, over the sequences
    for (const Kept& k : *kept) {
      result.loss += k.policy->loss() + k.value->loss();
      std::map<std::string, double> m = k.policy->metrics();
      for (const auto& [name, v] : k.value->metrics()) m[name] = v;
      stats.add(m, 1.0);
      const PpoAdvantages a = k.means();
      rollout.add({{"objective/kl", a.mean_kl},
                   {"objective/non_score_reward", a.mean_non_score_reward},
                   {"objective/scores", a.mean_score},
                   {"objective/rlhf_reward", a.mean_non_score_reward + a.mean_score}},
                  k.sequences);
    }
    result.loss = comm.sum(result.loss);
    stats.merge_ranks(comm);
    rollout.merge_ranks(comm);
    result.metrics = stats.means();
    for (const auto& [name, v] : rollout.means()) result.metrics[name] = v;
    result.metrics["reward"] = result.metrics["objective/scores"];
  });
}

}  // namespace

// extern: a namespace-scope const is file-local otherwise; objective_steps.cpp registers it.
extern const ObjectiveStep kPpoStep = {ObjectiveKind::ppo, run_ppo, nullptr};

}  // namespace sbp
