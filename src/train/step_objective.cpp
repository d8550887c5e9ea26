#include "train/step_objective.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "objective/dpo.h"
#include "objective/group_advantages.h"
#include "objective/grpo.h"
#include "objective/sft.h"
#include "objective/token_terms.h"

namespace sbp {

namespace {

// Accumulates per-micro-batch statistics into step means weighted by `w` (pairs or tokens).
struct WeightedMeans {
  std::map<std::string, double> sum;
  double weight = 0.0;
  void add(const std::map<std::string, double>& m, double w) {
    for (const auto& [k, v] : m)
      if (k != "loss") sum[k] += v * w;
    weight += w;
  }
  // The sums of every rank (a rank with no micro-batch has no keys: so gathered, not reduced).
  void merge_ranks(Communicator& comm) {
    if (comm.size() == 1) return;
    const std::vector<std::string> all = comm.allgather(nlohmann::json{{"sum", sum}, {"weight", weight}}.dump());
    sum.clear();
    weight = 0.0;
    for (const std::string& text : all) {
      const nlohmann::json j = nlohmann::json::parse(text);
      for (const auto& [k, v] : j["sum"].items()) sum[k] += v.get<double>();
      weight += j["weight"].get<double>();
    }
  }
  std::map<std::string, double> means() const {
    std::map<std::string, double> out;
    for (const auto& [k, v] : sum) out[k] = weight > 0.0 ? v / weight : 0.0;
    return out;
  }
};

// Slot `slot`'s forward_backward, with the hook of `sync` when it has one for the slot, and the
// completion of the slot's reductions.
void backward_slot(Engine& engine, const Batch& b, Objective& objective, const ParameterSet& grads,
                   DataParallel* sync, int64_t slot) {
  engine.forward_backward(b, objective, grads, sync ? sync->hook(slot) : nullptr);
  if (sync) sync->end_slot(slot);
}

void skip_slot(DataParallel* sync, int64_t slot) {
  if (sync) sync->empty_slot(slot);
}

DpoConfig dpo_config(const TrainConfig& c) {
  DpoConfig d;
  d.beta = c.dpo.beta;
  d.loss_type = parse_dpo_loss(c.dpo.loss_type);
  d.label_smoothing = c.dpo.label_smoothing;
  return d;
}

// Completion tokens with weight, per segment (the DPO sums and GRPO normalisers count them).
std::vector<double> segment_weights(const Batch& b) {
  const std::vector<float> w = b.target_weights();
  std::vector<double> out(b.seq_lens.size(), 0.0);
  size_t row = 0;
  for (size_t s = 0; s < b.seq_lens.size(); ++s) {
    for (int64_t i = 0; i < b.seq_lens[s]; ++i) out[s] += w[row + static_cast<size_t>(i)];
    row += static_cast<size_t>(b.seq_lens[s]);
  }
  return out;
}

}  // namespace

bool needs_reference_model(const TrainConfig& c) {
  // PPO always has one (TRL's ref_policy): the KL penalty is part of its per-token rewards and
  // objective/kl is logged even when ppo.beta is 0.
  return c.objective == "dpo" || c.objective == "ppo" || (c.objective == "grpo" && c.grpo.beta > 0.0);
}

PpoRolloutConfig ppo_rollout_config(const TrainConfig& c) {
  PpoRolloutConfig r;
  r.kl_coef = c.ppo.beta;
  r.kl_estimator = parse_kl_estimator(c.ppo.kl_estimator);
  r.gamma = c.ppo.gamma;
  r.lam = c.ppo.lam;
  return r;
}

PpoConfig ppo_objective_config(const TrainConfig& c, int64_t micro_batches) {
  PpoConfig p;
  p.cliprange = c.ppo.epsilon;
  p.cliprange_value = c.ppo.value_epsilon;
  p.vf_coef = c.ppo.vf_coef;
  p.grad_accum_steps = micro_batches;
  return p;
}

StepPart whole_step(std::vector<PackedBatch> batches) {
  StepPart p;
  p.step_micro_batches = p.slots = static_cast<int64_t>(batches.size());
  for (int64_t i = 0; i < p.slots; ++i) p.index.push_back(i);
  p.batches = std::move(batches);
  return p;
}

StepObjective::StepObjective(const TrainConfig& c, ReferenceModel* reference, TrainedValueModel* value,
                             Communicator& comm)
    : c_(c), reference_(reference), value_(value), comm_(comm) {
  if (needs_reference_model(c) && !reference)
    throw InputError("objective " + c.objective + " needs a reference model");
  if (c.objective == "ppo" && !value) throw InputError("objective ppo needs a value model");
}

StepObjective::Result StepObjective::run(Engine& policy, const std::vector<PackedBatch>& step,
                                         const ParameterSet& grads) {
  return run(policy, whole_step(step), grads, nullptr);
}

StepObjective::Result StepObjective::run(Engine& policy, const StepPart& part, const ParameterSet& grads,
                                         DataParallel* sync) {
  Result r;
  const std::vector<PackedBatch>& step = part.batches;
  if (c_.objective == "sft") {
    double normalizer = 0.0;  // trained tokens of the whole step, before any backward
    for (const PackedBatch& b : step) normalizer += b.batch.loss_weight_sum();
    normalizer = comm_.sum(normalizer);
    for (int64_t slot = 0; slot < part.slots; ++slot) {
      if (slot >= static_cast<int64_t>(step.size())) {
        skip_slot(sync, slot);
        continue;
      }
      const PackedBatch& b = step[static_cast<size_t>(slot)];
      SftObjective objective(b.batch, normalizer);
      backward_slot(policy, b.batch, objective, grads, sync, slot);
      r.loss += objective.loss();
    }
    r.loss = comm_.sum(r.loss);
    return r;
  }
  WeightedMeans stats;
  if (c_.objective == "dpo") {
    double pairs = 0.0;
    for (const PackedBatch& b : step) pairs += static_cast<double>(b.batch.seq_lens.size() / 2);
    pairs = comm_.sum(pairs);
    const DpoConfig cfg = dpo_config(c_);
    for (int64_t slot = 0; slot < part.slots; ++slot) {
      if (slot >= static_cast<int64_t>(step.size())) {
        skip_slot(sync, slot);
        continue;
      }
      const PackedBatch& b = step[static_cast<size_t>(slot)];
      const std::vector<float> ref = reference_->target_logp(b.batch);
      DpoObjective objective(b.batch, ref, cfg, pairs);
      backward_slot(policy, b.batch, objective, grads, sync, slot);
      r.loss += objective.loss();
      stats.add(objective.metrics(), static_cast<double>(b.batch.seq_lens.size() / 2));
    }
    r.loss = comm_.sum(r.loss);
    stats.merge_ranks(comm_);
    r.metrics = stats.means();
    return r;
  }
  if (c_.objective == "ppo") return run_ppo(policy, part, grads, sync);
  return run_grpo(policy, part, grads, sync);
}

namespace {

// GRPO's rewards of every micro-batch of the step, in step order, gathered from every rank.
struct StepRewards {
  std::vector<float> all;       // the step's rewards, micro-batch by micro-batch
  std::vector<size_t> begin;    // (step micro-batches) where each micro-batch's rewards start
  int64_t group = 0;            // completions per prompt
};

// Segments of the micro-batch's first example: the group size (every group has the same size).
int64_t first_group_size(const PackedBatch& b) {
  int64_t group = 0;
  for (int64_t e : b.segment_example) group += e == b.segment_example.front() ? 1 : 0;
  return group;
}

StepRewards gather_rewards(const StepPart& part, Communicator& comm) {
  StepRewards out;
  if (comm.size() == 1) {
    for (const PackedBatch& b : part.batches) {
      out.begin.push_back(out.all.size());
      for (double x : b.segment_reward) out.all.push_back(static_cast<float>(x));
      if (out.group == 0 && !b.segment_example.empty()) out.group = first_group_size(b);
    }
    return out;
  }
  // Per local micro-batch: [step index, group size, n, n rewards].
  std::vector<double> mine;
  for (size_t k = 0; k < part.batches.size(); ++k) {
    const PackedBatch& b = part.batches[k];
    mine.push_back(static_cast<double>(part.index[k]));
    mine.push_back(b.segment_example.empty() ? 0.0 : static_cast<double>(first_group_size(b)));
    mine.push_back(static_cast<double>(b.segment_reward.size()));
    for (double x : b.segment_reward) mine.push_back(x);
  }
  std::vector<std::vector<float>> by_index(static_cast<size_t>(part.step_micro_batches));
  std::vector<int64_t> groups(by_index.size(), 0);
  for (const std::vector<double>& from : comm.allgather(mine)) {
    for (size_t at = 0; at < from.size();) {
      const size_t index = static_cast<size_t>(from[at]), n = static_cast<size_t>(from[at + 2]);
      groups[index] = static_cast<int64_t>(from[at + 1]);
      for (size_t j = 0; j < n; ++j) by_index[index].push_back(static_cast<float>(from[at + 3 + j]));
      at += 3 + n;
    }
  }
  for (size_t i = 0; i < by_index.size(); ++i) {
    out.begin.push_back(out.all.size());
    out.all.insert(out.all.end(), by_index[i].begin(), by_index[i].end());
    if (out.group == 0) out.group = groups[i];
  }
  return out;
}

}  // namespace

StepObjective::Result StepObjective::run_grpo(Engine& policy, const StepPart& part, const ParameterSet& grads,
                                              DataParallel* sync) {
  Result r;
  WeightedMeans stats;
  const std::vector<PackedBatch>& step = part.batches;
  // Advantages over the step's groups, which sit as consecutive segments in order.
  const StepRewards rewards = gather_rewards(part, comm_);
  double completion_tokens = 0.0;
  for (const PackedBatch& b : step) completion_tokens += b.batch.loss_weight_sum();
  completion_tokens = comm_.sum(completion_tokens);
  const std::vector<float> advantages =
      group_advantages(rewards.all, rewards.group, parse_scale_rewards(c_.grpo.scale_rewards));
  GrpoConfig cfg;
  cfg.beta = c_.grpo.beta;
  cfg.epsilon_low = c_.grpo.epsilon;
  cfg.epsilon_high = c_.grpo.epsilon_high > 0.0 ? c_.grpo.epsilon_high : c_.grpo.epsilon;
  cfg.loss_type = parse_grpo_loss(c_.grpo.loss_type);
  cfg.grad_accum_steps = part.step_micro_batches;
  cfg.num_items_in_batch = completion_tokens;
  for (int64_t slot = 0; slot < part.slots; ++slot) {
    if (slot >= static_cast<int64_t>(step.size())) {
      skip_slot(sync, slot);
      continue;
    }
    const PackedBatch& b = step[static_cast<size_t>(slot)];
    const size_t at = rewards.begin[static_cast<size_t>(part.index[static_cast<size_t>(slot)])];
    const std::span<const float> adv(advantages.data() + at, b.batch.seq_lens.size());
    std::vector<float> ref;
    if (cfg.beta > 0.0) ref = reference_->target_logp(b.batch);
    GrpoObjective objective(b.batch, adv, cfg, {}, ref);
    backward_slot(policy, b.batch, objective, grads, sync, slot);
    r.loss += objective.loss();
    stats.add(objective.metrics(), b.batch.loss_weight_sum());
  }
  r.loss = comm_.sum(r.loss);
  stats.merge_ranks(comm_);
  r.metrics = stats.means();
  r.metrics["reward"] = 0.0;
  for (float x : rewards.all) r.metrics["reward"] += x / static_cast<double>(rewards.all.size());
  return r;
}

StepObjective::Result StepObjective::run_ppo(Engine& policy, const StepPart& part, const ParameterSet& grads,
                                             DataParallel* sync) {
  const std::vector<PackedBatch>& step = part.batches;
  // The rollout constants of every micro-batch, before any backward: the weights they are
  // computed from are the ones the step starts with.
  struct Rollout {
    std::vector<float> scores, old_logp, ref_logp, old_values;
  };
  std::vector<Rollout> rollouts(step.size());
  std::vector<PpoRolloutPart> parts;
  for (size_t i = 0; i < step.size(); ++i) {
    const Batch& b = step[i].batch;
    Rollout& ro = rollouts[i];
    for (double x : step[i].segment_reward) ro.scores.push_back(static_cast<float>(x));
    ro.old_logp = policy.score(b).logp;
    ro.ref_logp = reference_->target_logp(b);
    ro.old_values = value_->engine().values(b);
    parts.push_back({&b, ro.scores, ro.old_logp, ro.ref_logp, ro.old_values});
  }
  // Whitening over the whole step: its statistics are summed over the ranks.
  SumOverRanks sum_over_ranks;
  if (comm_.size() > 1) sum_over_ranks = [this](std::span<double> x) { comm_.sum(x); };
  const std::vector<PpoAdvantages> adv = ppo_step_advantages(parts, ppo_rollout_config(c_), sum_over_ranks);

  // One update per micro-batch; each term is already divided by ga, so the losses add up to
  // the mean over micro-batches of TRL's pg_loss + vf_coef * vf_loss.
  const PpoConfig cfg = ppo_objective_config(c_, part.step_micro_batches);
  DataParallel* value_sync = &value_->parallel();
  Result r;
  WeightedMeans stats;    // TRL logs the mean of its per-micro-batch statistics
  WeightedMeans rollout;  // and its rollout statistics over the batch's sequences
  for (int64_t slot = 0; slot < part.slots; ++slot) {
    if (slot >= static_cast<int64_t>(step.size())) {
      skip_slot(sync, slot);
      skip_slot(value_sync, slot);
      continue;
    }
    const size_t i = static_cast<size_t>(slot);
    const Batch& b = step[i].batch;
    PpoPolicyObjective pol(b, adv[i].advantages, rollouts[i].old_logp, cfg);
    backward_slot(policy, b, pol, grads, sync, slot);
    PpoValueObjective val(b, adv[i].returns, rollouts[i].old_values, cfg);
    backward_slot(value_->engine(), b, val, value_->grads(), value_sync, slot);
    r.loss += pol.loss() + val.loss();
    std::map<std::string, double> m = pol.metrics();
    for (const auto& [k, v] : val.metrics()) m[k] = v;
    stats.add(m, 1.0);
    const double n = static_cast<double>(b.seq_lens.size());
    rollout.add({{"objective/kl", adv[i].mean_kl},
                 {"objective/non_score_reward", adv[i].mean_non_score_reward},
                 {"objective/scores", adv[i].mean_score},
                 {"objective/rlhf_reward", adv[i].mean_non_score_reward + adv[i].mean_score}},
                n);
  }
  r.loss = comm_.sum(r.loss);
  stats.merge_ranks(comm_);
  rollout.merge_ranks(comm_);
  r.metrics = stats.means();
  for (const auto& [k, v] : rollout.means()) r.metrics[k] = v;
  r.metrics["reward"] = r.metrics["objective/scores"];
  return r;
}

double StepObjective::evaluate(Engine& policy, const std::vector<PackedBatch>& eval) {
  if (c_.objective == "sft") {
    double nll = 0.0, weight = 0.0;
    for (size_t i = static_cast<size_t>(comm_.rank()); i < eval.size(); i += static_cast<size_t>(comm_.size())) {
      const PackedBatch& p = eval[i];
      const Engine::TokenScores s = policy.score(p.batch);
      const std::vector<float> w = p.batch.target_weights();
      for (size_t t = 0; t < w.size(); ++t) {
        nll -= static_cast<double>(w[t]) * static_cast<double>(s.logp[t]);
        weight += w[t];
      }
    }
    double sums[2] = {nll, weight};
    comm_.sum(sums);
    return sums[1] > 0.0 ? sums[0] / sums[1] : 0.0;
  }
  if (c_.objective != "dpo") return std::numeric_limits<double>::quiet_NaN();  // grpo, ppo
  // DPO: per-sequence sums of policy and reference log-probs over the completion, then the
  // pair loss (the same formulas as DpoObjective, forward only).
  const DpoConfig cfg = dpo_config(c_);
  const bool ipo = cfg.loss_type == DpoLoss::ipo;
  double loss = 0.0;
  int64_t pairs = 0;
  for (size_t i = static_cast<size_t>(comm_.rank()); i < eval.size(); i += static_cast<size_t>(comm_.size())) {
    const PackedBatch& p = eval[i];
    const std::vector<float> pol = policy.score(p.batch).logp;
    const std::vector<float> ref = reference_->target_logp(p.batch);
    const std::vector<float> w = p.batch.target_weights();
    const std::vector<double> n = segment_weights(p.batch);
    std::vector<double> sp(p.batch.seq_lens.size(), 0.0), sr(sp.size(), 0.0);
    size_t row = 0;
    for (size_t s = 0; s < sp.size(); ++s) {
      for (int64_t i = 0; i < p.batch.seq_lens[s]; ++i, ++row) {
        sp[s] += static_cast<double>(w[row]) * pol[row];
        sr[s] += static_cast<double>(w[row]) * ref[row];
      }
    }
    for (size_t q = 0; q + 1 < sp.size(); q += 2) {
      const double nc = ipo ? n[q] : 1.0, nr = ipo ? n[q + 1] : 1.0;
      const double z = (sp[q] / nc - sp[q + 1] / nr) - (sr[q] / nc - sr[q + 1] / nr);
      loss += dpo_pair_loss(z, cfg.loss_type, cfg.beta, cfg.label_smoothing).value;
      ++pairs;
    }
  }
  loss = comm_.sum(loss);
  pairs = comm_.sum(pairs);
  return pairs > 0 ? loss / static_cast<double>(pairs) : 0.0;
}

}  // namespace sbp
