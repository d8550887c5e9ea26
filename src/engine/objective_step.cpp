#include "engine/objective_step.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "engine/gradcheck.h"
#include "engine/reference_model.h"
#include "objective/sequence_rows.h"
#include "objective/sft.h"

namespace sbp {

ObjectiveKind parse_objective(const std::string& name) {
  if (name == "sft") return ObjectiveKind::sft;
  if (name == "dpo") return ObjectiveKind::dpo;
  if (name == "grpo") return ObjectiveKind::grpo;
  if (name == "ppo") return ObjectiveKind::ppo;
  throw InputError("unknown objective '" + name + "' (use sft, dpo, grpo or ppo)");
}

const char* objective_name(ObjectiveKind k) {
  switch (k) {
    case ObjectiveKind::sft: return "sft";
    case ObjectiveKind::dpo: return "dpo";
    case ObjectiveKind::grpo: return "grpo";
    case ObjectiveKind::ppo: return "ppo";
  }
  return "?";
}

bool ObjectiveSetup::needs_reference() const {
  return kind == ObjectiveKind::dpo || kind == ObjectiveKind::ppo ||
         (kind == ObjectiveKind::grpo && grpo.beta != 0.0);
}

ObjectiveSetup ObjectiveArgs::setup() const {
  ObjectiveSetup s;
  s.kind = parse_objective(objective);
  s.dpo.loss_type = parse_dpo_loss(dpo_loss);
  s.dpo.label_smoothing = label_smoothing;
  s.grpo.loss_type = parse_grpo_loss(grpo_loss);
  s.scale_rewards = parse_scale_rewards(scale_rewards);
  if (group_size < 1) throw InputError("--group-size must be >= 1");
  s.group_size = group_size;
  s.grpo.entropy_coef = entropy_coef;
  s.ppo.entropy_coef = entropy_coef;
  if (beta >= 0.0) {
    if (s.kind == ObjectiveKind::dpo && beta == 0.0) throw InputError("--beta must be > 0 for dpo");
    s.dpo.beta = beta;
    s.grpo.beta = beta;
    s.rollout.kl_coef = beta;
  } else {
    s.grpo.beta = 0.04;  // so that a GRPO step includes its reference model (TRL's default is 0)
  }
  return s;
}

std::string ObjectiveArgs::describe() const {
  const ObjectiveSetup s = setup();
  char buf[160];
  switch (s.kind) {
    case ObjectiveKind::sft: return "sft";
    case ObjectiveKind::dpo:
      std::snprintf(buf, sizeof buf, "dpo (%s, beta %g, label smoothing %g)",
                    dpo_loss_name(s.dpo.loss_type), s.dpo.beta, s.dpo.label_smoothing);
      return buf;
    case ObjectiveKind::grpo:
      std::snprintf(buf, sizeof buf, "grpo (%s, beta %g, scale_rewards %s, group %lld)",
                    grpo_loss_name(s.grpo.loss_type), s.grpo.beta,
                    scale_rewards_name(s.scale_rewards), static_cast<long long>(s.group_size));
      return buf;
    case ObjectiveKind::ppo:
      std::snprintf(buf, sizeof buf, "ppo (kl_coef %g, vf_coef %g)", s.rollout.kl_coef,
                    s.ppo.vf_coef);
      return buf;
  }
  return "?";
}

namespace {

// Sequences per group: DPO pairs, GRPO groups (at most the number of sequences), else 1.
int64_t group_of(const ObjectiveSetup& s, int64_t sequences) {
  if (s.kind == ObjectiveKind::dpo) return 2;
  if (s.kind == ObjectiveKind::grpo) return std::clamp<int64_t>(s.group_size, 1, sequences);
  return 1;
}

}  // namespace

Batch random_objective_batch(const ObjectiveSetup& setup, int64_t vocab, int64_t T,
                             int64_t segments, uint64_t seed) {
  if (setup.kind == ObjectiveKind::sft) return random_batch(vocab, T, segments, seed, true);
  if (T < 4) throw InputError("--seq-len must be at least 4 for " +
                              std::string(objective_name(setup.kind)));
  Rng rng(seed, "objective-batch");
  int64_t S = std::clamp<int64_t>(segments, 1, T / 2);
  const int64_t G = group_of(setup, S);
  S = std::max(G, S - S % G);
  // Every segment >= 2 tokens; the rest spread at random, so lengths differ.
  std::vector<int64_t> len(static_cast<size_t>(S), 2);
  for (int64_t r = 0; r < T - 2 * S; ++r) ++len[static_cast<size_t>(rng.below(static_cast<uint64_t>(S)))];
  std::vector<PromptCompletion> seqs;
  for (int64_t g = 0; g < S; g += G) {
    // The group shares a prompt of about a third of its shortest sequence (>= 1 token, leaving
    // >= 1 completion token, whose row after the prompt is scored).
    int64_t p = T;
    for (int64_t i = g; i < g + G; ++i) p = std::min(p, std::max<int64_t>(1, len[static_cast<size_t>(i)] / 3));
    std::vector<int32_t> prompt;
    for (int64_t j = 0; j < p; ++j) prompt.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
    for (int64_t i = g; i < g + G; ++i) {
      PromptCompletion pc;
      pc.prompt = prompt;
      for (int64_t j = p; j < len[static_cast<size_t>(i)]; ++j)
        pc.completion.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab))));
      seqs.push_back(std::move(pc));
    }
  }
  return prompt_completion_batch(seqs);
}

ParameterSet make_reference_weights(const ModelConfig& cfg, const ParameterSet& policy,
                                    Pool& pool, float noise, uint64_t seed) {
  ParameterSet ref(cfg, pool, Category::weights, DType::F32, false);
  for (size_t i = 0; i < ref.size(); ++i) {
    const Tensor& dst = ref.tensor(i);
    const Tensor& src = policy.get(ref.name(i));
    if (!dst.data || !src.data) continue;
    Rng rng(seed, "reference:" + ref.name(i));
    for (int64_t j = 0; j < dst.numel(); ++j)
      dst.f32()[j] = src.f32()[j] + (noise != 0.0f ? noise * rng.normal() : 0.0f);
  }
  return ref;
}

StepConstants make_step_constants(const ObjectiveSetup& setup, const ObjectiveModels& models,
                                  const Batch& batch, Backend& be, Pool& pool,
                                  const ExecConfig& exec, uint64_t seed) {
  StepConstants c;
  if (setup.kind != ObjectiveKind::grpo && setup.kind != ObjectiveKind::ppo) return c;
  const SequenceRows rows(batch);
  const int64_t S = rows.num_sequences();
  Rng rng(seed, "step-constants");
  for (int64_t s = 0; s < S; ++s) c.rewards.push_back(rng.normal());
  // The sampling policy's log-probs: the current ones, moved by noise on completion rows.
  auto old_logp = [&] {
    Engine policy(models.cfg, models.policy, be, pool, exec);
    std::vector<float> lp = policy.score(batch).logp;
    for (size_t t = 0; t < lp.size(); ++t)
      if (rows.weight[t] > 0.0f) lp[t] += setup.old_logp_noise * rng.normal();
    return lp;
  };
  if (setup.kind == ObjectiveKind::grpo) {
    c.advantages = group_advantages(c.rewards, group_of(setup, S), setup.scale_rewards);
    if (setup.old_logp_noise != 0.0f) c.old_logp = old_logp();
    return c;
  }
  SBP_CHECK(models.reference && models.value, "ppo needs a reference and a value model");
  c.old_logp = old_logp();
  ReferenceModel ref(models.cfg, *models.reference, be, pool, exec);
  const std::vector<float> ref_logp = ref.target_logp(batch);
  Engine value(models.cfg, *models.value, be, pool, exec);
  c.old_values = value.values(batch);
  for (size_t t = 0; t < c.old_values.size(); ++t)
    if (rows.weight[t] > 0.0f) c.old_values[t] += setup.value_noise * rng.normal();
  if (!be.computes()) {  // shapes only: constants of the right size are all a plan needs
    c.advantages.assign(static_cast<size_t>(rows.num_rows()), 0.0f);
    c.returns = c.advantages;
    return c;
  }
  const PpoAdvantages a =
      ppo_advantages(batch, c.rewards, c.old_logp, ref_logp, c.old_values, setup.rollout);
  c.advantages = a.advantages;
  c.returns = a.returns;
  c.rollout_metrics = {{"objective/kl", a.mean_kl},
                       {"objective/non_score_reward", a.mean_non_score_reward},
                       {"objective/scores", a.mean_score},
                       {"objective/rlhf_reward", a.mean_non_score_reward + a.mean_score}};
  return c;
}

StepOutcome run_objective_step(const ObjectiveSetup& setup, const ObjectiveModels& models,
                               const StepConstants& c, const Batch& batch, Backend& be,
                               Pool& pool, const ExecConfig& exec,
                               const ParameterSet& policy_grads, const ParameterSet* value_grads) {
  StepOutcome out;
  std::vector<float> ref_logp;
  if (setup.needs_reference() && setup.kind != ObjectiveKind::ppo) {
    SBP_CHECK(models.reference, std::string(objective_name(setup.kind)) + " needs a reference model");
    ReferenceModel ref(models.cfg, *models.reference, be, pool, exec);
    ref_logp = ref.target_logp(batch);
  }
  Engine policy(models.cfg, models.policy, be, pool, exec);
  auto finish = [&](Objective& obj) {
    policy.forward_backward(batch, obj, policy_grads);
    out.loss = obj.loss();
    out.metrics = obj.metrics();
  };
  switch (setup.kind) {
    case ObjectiveKind::sft: {
      SftObjective obj(batch, batch.loss_weight_sum());
      finish(obj);
      break;
    }
    case ObjectiveKind::dpo: {
      DpoObjective obj(batch, ref_logp, setup.dpo);
      finish(obj);
      break;
    }
    case ObjectiveKind::grpo: {
      GrpoObjective obj(batch, c.advantages, setup.grpo, c.old_logp, ref_logp);
      finish(obj);
      break;
    }
    case ObjectiveKind::ppo: {
      SBP_CHECK(models.value && value_grads, "ppo needs a value model and its gradients");
      PpoPolicyObjective pol(batch, c.advantages, c.old_logp, setup.ppo);
      finish(pol);
      Engine value(models.cfg, *models.value, be, pool, exec);
      PpoValueObjective vobj(batch, c.returns, c.old_values, setup.ppo);
      value.forward_backward(batch, vobj, *value_grads);
      out.loss += vobj.loss();
      for (const auto& [k, v] : vobj.metrics())
        if (k != "loss") out.metrics[k] = v;
      out.metrics["loss"] = out.loss;
      for (const auto& [k, v] : c.rollout_metrics) out.metrics[k] = v;
      break;
    }
  }
  return out;
}

}  // namespace sbp
