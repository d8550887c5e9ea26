// The trainer's PPO step (src/train/step_objective.h): its whitening spans the micro-batches of
// the step (so splitting a batch changes nothing), its gradients are exactly those of the
// gradcheck/bench path (run_objective_step) for the same rollout constants, and a few steps
// move the policy toward the completions with the higher scores.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "engine/objective_step.h"
#include "engine/reference_model.h"
#include "engine/value_model.h"
#include "objective/gae.h"
#include "objective/sequence_rows.h"
#include "train/ppo_value_model.h"
#include "train/step_objective.h"

namespace sbp {
namespace {

// Segments [first, first + count) of `b` as a batch of their own.
Batch segments_of(const Batch& b, size_t first, size_t count) {
  Batch out;
  size_t row = 0;
  for (size_t s = 0; s < first; ++s) row += static_cast<size_t>(b.seq_lens[s]);
  for (size_t s = first; s < first + count; ++s) {
    const size_t n = static_cast<size_t>(b.seq_lens[s]);
    out.tokens.insert(out.tokens.end(), b.tokens.begin() + row, b.tokens.begin() + row + n);
    out.loss_mask.insert(out.loss_mask.end(), b.loss_mask.begin() + row, b.loss_mask.begin() + row + n);
    out.seq_lens.push_back(b.seq_lens[s]);
    row += n;
  }
  return out;
}

std::vector<float> normals(size_t n, Rng& rng, float scale, float shift = 0.0f) {
  std::vector<float> v(n);
  for (float& x : v) x = shift + scale * rng.normal();
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data, b.data, static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

ObjectiveSetup ppo_setup() {
  ObjectiveSetup s;
  s.kind = ObjectiveKind::ppo;
  return s;
}

TEST(PpoStep, WhiteningOverMicroBatchesEqualsOneBatch) {
  const Batch whole = random_objective_batch(ppo_setup(), 50, 60, 7, 11);
  ASSERT_EQ(whole.seq_lens.size(), 7u);
  const Batch a = segments_of(whole, 0, 3), b = segments_of(whole, 3, 4);
  Rng rng(5, "ppo-step-test");
  const size_t T = static_cast<size_t>(whole.size()), Ta = static_cast<size_t>(a.size());
  const std::vector<float> logp = normals(T, rng, 0.5f, -2.0f), ref = normals(T, rng, 0.5f, -2.0f);
  const std::vector<float> values = normals(T, rng, 1.0f), scores = normals(7, rng, 1.0f);
  for (const bool whiten_rewards : {false, true}) {
    PpoRolloutConfig cfg;
    cfg.kl_coef = 0.1;
    cfg.gamma = 0.9;
    cfg.whiten_rewards = whiten_rewards;
    const PpoAdvantages one = ppo_advantages(whole, scores, logp, ref, values, cfg);
    auto head = [&](const std::vector<float>& v) { return std::span<const float>(v.data(), Ta); };
    auto tail = [&](const std::vector<float>& v) { return std::span<const float>(v.data() + Ta, T - Ta); };
    const std::vector<PpoRolloutPart> parts = {
        {&a, std::span<const float>(scores.data(), 3), head(logp), head(ref), head(values)},
        {&b, std::span<const float>(scores.data() + 3, 4), tail(logp), tail(ref), tail(values)}};
    const std::vector<PpoAdvantages> split = ppo_step_advantages(parts, cfg);
    ASSERT_EQ(split.size(), 2u);
    auto joined = [&](std::vector<float> PpoAdvantages::*field) {
      std::vector<float> v = split[0].*field;
      v.insert(v.end(), (split[1].*field).begin(), (split[1].*field).end());
      return v;
    };
    // Same rows in the same order: bit for bit, not just close.
    EXPECT_TRUE(same_bits(joined(&PpoAdvantages::advantages), one.advantages)) << whiten_rewards;
    EXPECT_TRUE(same_bits(joined(&PpoAdvantages::returns), one.returns)) << whiten_rewards;
    EXPECT_TRUE(same_bits(joined(&PpoAdvantages::rewards), one.rewards)) << whiten_rewards;
    // Each part's means are over its own sequences; weighted by them they are the batch's.
    EXPECT_NEAR((3 * split[0].mean_kl + 4 * split[1].mean_kl) / 7, one.mean_kl, 1e-12);
    EXPECT_NEAR((3 * split[0].mean_score + 4 * split[1].mean_score) / 7, one.mean_score, 1e-12);
    // Whitening each micro-batch on its own would not be the same (what the step avoids).
    const PpoAdvantages alone = ppo_advantages(a, std::span<const float>(scores.data(), 3), head(logp), head(ref),
                                               head(values), cfg);
    EXPECT_FALSE(same_bits(alone.advantages, split[0].advantages));
    // One part is ppo_advantages.
    const PpoRolloutPart single{&whole, scores, logp, ref, values};
    EXPECT_TRUE(same_bits(ppo_step_advantages(std::span<const PpoRolloutPart>(&single, 1), cfg)[0].advantages,
                          one.advantages));
  }
}

// A tiny policy, its reference (policy + noise), a value model and a PPO step, all on one pool.
struct PpoFixture {
  ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  Pool pool{ledger};
  CpuBackend be;
  ExecConfig exec = parse_mode("stream");
  ParameterSet w{cfg, pool, Category::weights, DType::F32, false};
  ParameterSet ref_w;
  TrainConfig c;
  PackedBatch packed;

  // reference_noise 0: the reference is the starting policy, as in the trainer.
  explicit PpoFixture(float reference_noise, const std::string& kl_estimator) {
    exec.layer_chunk = 7;
    exec.head_chunk = 5;
    init_parameters(w, 7, InitStyle::test, 0.2f);
    ref_w = make_reference_weights(cfg, w, pool, reference_noise, 3);
    c.objective = "ppo";
    c.ppo.beta = 0.1;
    c.ppo.kl_estimator = kl_estimator;
    c.ppo.vf_coef = 0.5;
    packed.batch = random_objective_batch(ppo_setup(), cfg.vocab_size, 41, 4, 13);
    Rng rng(21, "ppo-scores");
    for (size_t s = 0; s < packed.batch.seq_lens.size(); ++s) {
      packed.segment_example.push_back(static_cast<int64_t>(s));
      packed.segment_reward.push_back(rng.normal());
    }
  }
};

TEST(PpoStep, TrainerGradientsEqualTheObjectiveStepPath) {
  PpoFixture f(0.05f, "k3");  // a reference apart from the policy: the KL terms are not 0
  ReferenceModel reference(f.cfg, f.ref_w, f.be, f.pool, f.exec);
  TrainedValueModel value(f.cfg, f.pool, f.be, f.exec, AdamWConfig{});
  init_parameters(value.weights(), 9, InitStyle::test, 0.2f);
  Engine policy(f.cfg, f.w, f.be, f.pool, f.exec);
  ParameterSet g1(f.cfg, f.pool, Category::grads, DType::F32, true);
  StepObjective step(f.c, &reference, &value);
  const StepObjective::Result got = step.run(policy, {f.packed}, g1);

  // gradcheck/bench's path, with the constants the trainer computes: old = current policy,
  // reference log-probs, the value model's values, the records' rewards as scores.
  const Batch& b = f.packed.batch;
  ObjectiveSetup setup = ppo_setup();
  setup.ppo = ppo_objective_config(f.c, 1);
  setup.rollout = ppo_rollout_config(f.c);
  StepConstants k;
  for (double r : f.packed.segment_reward) k.rewards.push_back(static_cast<float>(r));
  k.old_logp = Engine(f.cfg, f.w, f.be, f.pool, f.exec).score(b).logp;
  const std::vector<float> ref_logp = reference.target_logp(b);
  k.old_values = Engine(f.cfg, value.weights(), f.be, f.pool, f.exec).values(b);
  const PpoAdvantages a = ppo_advantages(b, k.rewards, k.old_logp, ref_logp, k.old_values, setup.rollout);
  k.advantages = a.advantages;
  k.returns = a.returns;
  ParameterSet g2(f.cfg, f.pool, Category::grads, DType::F32, true);
  ParameterSet vg2 = make_value_parameters(f.cfg, f.pool, Category::grads, DType::F32, true);
  const ObjectiveModels models{f.cfg, f.w, &f.ref_w, &value.weights()};
  const StepOutcome want = run_objective_step(setup, models, k, b, f.be, f.pool, f.exec, g2, &vg2);

  EXPECT_EQ(got.loss, want.loss);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_TRUE(same_bits(g1.tensor(i), g2.tensor(i))) << g1.name(i);
  for (size_t i = 0; i < vg2.size(); ++i)
    EXPECT_TRUE(same_bits(value.grads().tensor(i), vg2.tensor(i))) << "value " << vg2.name(i);
  for (const char* key : {"loss/policy", "loss/value", "policy/entropy_avg", "policy/approxkl_avg", "val/clipfrac_avg"}) {
    ASSERT_TRUE(got.metrics.count(key)) << key;
    EXPECT_DOUBLE_EQ(got.metrics.at(key), want.metrics.at(key)) << key;
  }
  EXPECT_DOUBLE_EQ(got.metrics.at("objective/kl"), a.mean_kl);
  EXPECT_GT(a.mean_kl, 0.0);
  EXPECT_DOUBLE_EQ(got.metrics.at("objective/scores"), a.mean_score);
  EXPECT_DOUBLE_EQ(got.metrics.at("objective/non_score_reward"), a.mean_non_score_reward);
  double gnorm = 0.0;
  for (size_t i = 0; i < vg2.size(); ++i) gnorm += f.be.sum_squares(vg2.tensor(i));
  EXPECT_GT(gnorm, 0.0);
}

// Σ over sequences of (score - mean score) * Σ_completion logp: grows when the policy favours
// the better completions.
double score_logp_covariance(Engine& policy, const PackedBatch& p) {
  const std::vector<float> logp = policy.score(p.batch).logp;
  const SequenceRows rows(p.batch);
  double mean = 0.0;
  for (double r : p.segment_reward) mean += r / static_cast<double>(p.segment_reward.size());
  double cov = 0.0;
  for (int64_t s = 0; s < rows.num_sequences(); ++s) {
    double sum = 0.0;
    for (int64_t t = rows.begin[s]; t < rows.begin[s + 1]; ++t) sum += rows.weight[static_cast<size_t>(t)] * logp[static_cast<size_t>(t)];
    cov += (p.segment_reward[static_cast<size_t>(s)] - mean) * sum;
  }
  return cov;
}

TEST(PpoStep, StepsMoveThePolicyTowardHigherScores) {
  PpoFixture f(0.0f, "k1");
  ReferenceModel reference(f.cfg, f.ref_w, f.be, f.pool, f.exec);
  const AdamWConfig opt_cfg{};
  TrainedValueModel value(f.cfg, f.pool, f.be, f.exec, opt_cfg);
  init_parameters(value.weights(), 9, InitStyle::hf);
  Engine policy(f.cfg, f.w, f.be, f.pool, f.exec);
  ParameterSet g(f.cfg, f.pool, Category::grads, DType::F32, true);
  AdamW opt(f.cfg, f.pool, opt_cfg);
  StepObjective step(f.c, &reference, &value);
  const double before = score_logp_covariance(policy, f.packed);
  double first_value_loss = 0.0, last_value_loss = 0.0;
  for (int i = 0; i < 4; ++i) {
    for (size_t j = 0; j < g.size(); ++j) f.be.fill(g.tensor(j), 0.0f);
    for (size_t j = 0; j < value.grads().size(); ++j) f.be.fill(value.grads().tensor(j), 0.0f);
    const StepObjective::Result r = step.run(policy, {f.packed}, g);
    (i == 0 ? first_value_loss : last_value_loss) = r.metrics.at("loss/value");
    clip_grad_norm(g, f.be, 1.0);
    clip_grad_norm(value.grads(), f.be, 1.0);
    opt.step(f.w, g, f.be, 1e-3f);
    value.optimizer().step(value.weights(), value.grads(), f.be, 1e-3f);
  }
  EXPECT_GT(score_logp_covariance(policy, f.packed), before);
  EXPECT_LT(last_value_loss, first_value_loss);
}

}  // namespace
}  // namespace sbp
