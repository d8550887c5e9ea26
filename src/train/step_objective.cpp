#include "train/step_objective.h"

#include <cmath>
#include <limits>

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
  std::map<std::string, double> means() const {
    std::map<std::string, double> out;
    for (const auto& [k, v] : sum) out[k] = weight > 0.0 ? v / weight : 0.0;
    return out;
  }
};

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

StepObjective::StepObjective(const TrainConfig& c, ReferenceModel* reference, TrainedValueModel* value)
    : c_(c), reference_(reference), value_(value) {
  if (needs_reference_model(c) && !reference)
    throw InputError("objective " + c.objective + " needs a reference model");
  if (c.objective == "ppo" && !value) throw InputError("objective ppo needs a value model");
}

StepObjective::Result StepObjective::run(Engine& policy, const std::vector<PackedBatch>& step,
                                         const ParameterSet& grads) {
  Result r;
  if (c_.objective == "sft") {
    double normalizer = 0.0;  // trained tokens of the whole step, before any backward
    for (const PackedBatch& b : step) normalizer += b.batch.loss_weight_sum();
    for (const PackedBatch& b : step) {
      SftObjective objective(b.batch, normalizer);
      policy.forward_backward(b.batch, objective, grads);
      r.loss += objective.loss();
    }
    return r;
  }
  WeightedMeans stats;
  if (c_.objective == "dpo") {
    double pairs = 0.0;
    for (const PackedBatch& b : step) pairs += static_cast<double>(b.batch.seq_lens.size() / 2);
    const DpoConfig cfg = dpo_config(c_);
    for (const PackedBatch& b : step) {
      const std::vector<float> ref = reference_->target_logp(b.batch);
      DpoObjective objective(b.batch, ref, cfg, pairs);
      policy.forward_backward(b.batch, objective, grads);
      r.loss += objective.loss();
      stats.add(objective.metrics(), static_cast<double>(b.batch.seq_lens.size() / 2));
    }
    r.metrics = stats.means();
    return r;
  }
  if (c_.objective == "ppo") return run_ppo(policy, step, grads);
  return run_grpo(policy, step, grads);
}

StepObjective::Result StepObjective::run_grpo(Engine& policy, const std::vector<PackedBatch>& step,
                                              const ParameterSet& grads) {
  Result r;
  WeightedMeans stats;
  // Advantages over the step's groups, which sit as consecutive segments in order.
  std::vector<float> rewards;
  double completion_tokens = 0.0;
  int64_t group = 0;
  for (const PackedBatch& b : step) {
    for (double x : b.segment_reward) rewards.push_back(static_cast<float>(x));
    completion_tokens += b.batch.loss_weight_sum();
    if (group == 0 && !b.segment_example.empty()) {
      for (int64_t e : b.segment_example) group += e == b.segment_example.front() ? 1 : 0;
    }
  }
  const std::vector<float> advantages =
      group_advantages(rewards, group, parse_scale_rewards(c_.grpo.scale_rewards));
  GrpoConfig cfg;
  cfg.beta = c_.grpo.beta;
  cfg.epsilon_low = c_.grpo.epsilon;
  cfg.epsilon_high = c_.grpo.epsilon_high > 0.0 ? c_.grpo.epsilon_high : c_.grpo.epsilon;
  cfg.loss_type = parse_grpo_loss(c_.grpo.loss_type);
  cfg.grad_accum_steps = static_cast<int64_t>(step.size());
  cfg.num_items_in_batch = completion_tokens;
  size_t at = 0;
  for (const PackedBatch& b : step) {
    const std::span<const float> adv(advantages.data() + at, b.batch.seq_lens.size());
    at += b.batch.seq_lens.size();
    std::vector<float> ref;
    if (cfg.beta > 0.0) ref = reference_->target_logp(b.batch);
    GrpoObjective objective(b.batch, adv, cfg, {}, ref);
    policy.forward_backward(b.batch, objective, grads);
    r.loss += objective.loss();
    stats.add(objective.metrics(), b.batch.loss_weight_sum());
  }
  r.metrics = stats.means();
  r.metrics["reward"] = 0.0;
  for (float x : rewards) r.metrics["reward"] += x / static_cast<double>(rewards.size());
  return r;
}

StepObjective::Result StepObjective::run_ppo(Engine& policy, const std::vector<PackedBatch>& step,
                                             const ParameterSet& grads) {
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
  const std::vector<PpoAdvantages> adv = ppo_step_advantages(parts, ppo_rollout_config(c_));

  // One update per micro-batch; each term is already divided by ga, so the losses add up to
  // the mean over micro-batches of TRL's pg_loss + vf_coef * vf_loss.
  const PpoConfig cfg = ppo_objective_config(c_, static_cast<int64_t>(step.size()));
  Result r;
  WeightedMeans stats;    // TRL logs the mean of its per-micro-batch statistics
  WeightedMeans rollout;  // and its rollout statistics over the batch's sequences
  for (size_t i = 0; i < step.size(); ++i) {
    const Batch& b = step[i].batch;
    PpoPolicyObjective pol(b, adv[i].advantages, rollouts[i].old_logp, cfg);
    policy.forward_backward(b, pol, grads);
    PpoValueObjective val(b, adv[i].returns, rollouts[i].old_values, cfg);
    value_->engine().forward_backward(b, val, value_->grads());
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
  r.metrics = stats.means();
  for (const auto& [k, v] : rollout.means()) r.metrics[k] = v;
  r.metrics["reward"] = r.metrics["objective/scores"];
  return r;
}

double StepObjective::evaluate(Engine& policy, const std::vector<PackedBatch>& eval) {
  if (c_.objective == "sft") {
    double nll = 0.0, weight = 0.0;
    for (const PackedBatch& p : eval) {
      const Engine::TokenScores s = policy.score(p.batch);
      const std::vector<float> w = p.batch.target_weights();
      for (size_t t = 0; t < w.size(); ++t) {
        nll -= static_cast<double>(w[t]) * static_cast<double>(s.logp[t]);
        weight += w[t];
      }
    }
    return weight > 0.0 ? nll / weight : 0.0;
  }
  if (c_.objective != "dpo") return std::numeric_limits<double>::quiet_NaN();  // grpo, ppo
  // DPO: per-sequence sums of policy and reference log-probs over the completion, then the
  // pair loss (the same formulas as DpoObjective, forward only).
  const DpoConfig cfg = dpo_config(c_);
  const bool ipo = cfg.loss_type == DpoLoss::ipo;
  double loss = 0.0;
  int64_t pairs = 0;
  for (const PackedBatch& p : eval) {
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
  return pairs > 0 ? loss / static_cast<double>(pairs) : 0.0;
}

}  // namespace sbp
