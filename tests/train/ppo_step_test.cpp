// The PPO step of the step runner (src/step/ppo_step.cpp): its whitening spans the micro-batches
// of the step (so splitting a batch changes nothing), its gradients are exactly those of the same
// step assembled by hand from the engine and the objectives, and a few steps move the policy
// toward the completions with the higher scores.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "model/value_model_io.h"
#include "objective/gae.h"
#include "objective/sequence_rows.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "support/test_support.h"
#include "train/train_config.h"

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
    out.loss_mask.insert(out.loss_mask.end(), b.loss_mask.begin() + row,
                         b.loss_mask.begin() + row + n);
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
  return a.numel() == b.numel() && test::bytes_of(a) == test::bytes_of(b);
}

TEST(PpoStep, WhiteningOverMicroBatchesEqualsOneBatch) {
  const Batch whole = cli::random_objective_batch(ObjectiveKind::ppo, 0, 50, 60, 7, 11);
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
    auto tail = [&](const std::vector<float>& v) {
      return std::span<const float>(v.data() + Ta, T - Ta);
    };
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
    const PpoAdvantages alone = ppo_advantages(a, std::span<const float>(scores.data(), 3),
                                               head(logp), head(ref), head(values), cfg);
    EXPECT_FALSE(same_bits(alone.advantages, split[0].advantages));
    // One part is ppo_advantages.
    const PpoRolloutPart single{&whole, scores, logp, ref, values};
    EXPECT_TRUE(same_bits(
        ppo_step_advantages(std::span<const PpoRolloutPart>(&single, 1), cfg)[0].advantages,
        one.advantages));
  }
}

// A tiny policy, its reference (policy + noise), a value model and a PPO micro-batch, all the
// models of a run in one ModelSet.
struct PpoFixture {
  ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool{ledger, be};
  ExecConfig exec = parse_mode("stream");
  TrainConfig c;
  ObjectiveSetup setup;
  AdamWConfig optim;
  std::unique_ptr<ModelSet> models;
  MicroBatch mb;

  // reference_noise 0: the reference is the starting policy, as in the trainer.
  PpoFixture(float reference_noise, KlEstimator kl_estimator, InitStyle value_init) {
    exec.layer_chunk = 7;
    exec.head_chunk = 5;
    c.objective = ObjectiveKind::ppo;
    c.objective_settings.rollout.kl_coef = 0.1;  // ppo.beta
    c.objective_settings.rollout.kl_estimator = kl_estimator;
    c.objective_settings.ppo.vf_coef = 0.5;
    setup = c.objective_setup();
    models = std::make_unique<ModelSet>(setup, cfg, pool, be, ModelSetOptions{.optim = &optim});
    init_parameters(models->policy_weights(), 7, InitStyle::test, 0.2f);
    const ParameterSet ref =
        cli::make_reference_weights(cfg, models->policy_weights(), pool, reference_noise, 3);
    for (size_t i = 0; i < ref.size(); ++i)
      be.copy(models->reference_weights().tensor(i), ref.tensor(i));
    init_parameters(models->value_weights(), 9, value_init,
                    value_init == InitStyle::test ? 0.2f : 0.02f);
    mb.batch = cli::random_objective_batch(ObjectiveKind::ppo, 0, cfg.vocab_size, 41, 4, 13);
    Rng rng(21, "ppo-scores");
    for (size_t s = 0; s < mb.batch.seq_lens.size(); ++s) mb.rewards.push_back(rng.normal());
  }
  StepResult step() {
    return StepRunner(setup, models->views(), be, pool, exec).run(StepBatches::whole({mb}));
  }
};

TEST(PpoStep, RunnerGradientsEqualTheStepAssembledByHand) {
  PpoFixture f(0.05f, KlEstimator::k3,
               InitStyle::test);  // a reference apart from the policy: KL terms not 0
  const StepResult got = f.step();

  // The same step written out: old = the current policy's, the reference's log-probs, the value
  // model's values, the rewards as scores; GAE; then each model's objective through the engine.
  const Batch& b = f.mb.batch;
  const ParameterSet& w = f.models->policy_weights();
  const ParameterSet& vw = f.models->value_weights();
  const std::vector<float> old_logp = Engine(f.cfg, w, f.be, f.pool, f.exec).score(b).logp;
  const std::vector<float> ref_logp =
      Engine(f.cfg, f.models->reference_weights(), f.be, f.pool, f.exec).score(b).logp;
  const std::vector<float> old_values = Engine(f.cfg, vw, f.be, f.pool, f.exec).values(b);
  const PpoAdvantages a =
      ppo_advantages(b, f.mb.rewards, old_logp, ref_logp, old_values, f.setup.rollout);
  ParameterSet g2(f.cfg, f.pool, Category::grads, DType::F32, true);
  ParameterSet vg2 = make_value_parameters(f.cfg, f.pool, Category::grads, DType::F32, true);
  PpoPolicyObjective pol(b, a.advantages, old_logp, f.setup.ppo);
  Engine(f.cfg, w, f.be, f.pool, f.exec).forward_backward(b, pol, g2);
  PpoValueObjective val(b, a.returns, old_values, f.setup.ppo);
  Engine(f.cfg, vw, f.be, f.pool, f.exec).forward_backward(b, val, vg2);

  EXPECT_EQ(got.loss, pol.loss() + val.loss());
  const ParameterSet& g1 = f.models->policy().grads();
  const ParameterSet& vg1 = f.models->value().grads();
  for (size_t i = 0; i < g1.size(); ++i)
    EXPECT_TRUE(same_bits(g1.tensor(i), g2.tensor(i))) << g1.name(i);
  for (size_t i = 0; i < vg2.size(); ++i)
    EXPECT_TRUE(same_bits(vg1.tensor(i), vg2.tensor(i))) << "value " << vg2.name(i);
  std::map<std::string, double> want = pol.metrics();
  for (const auto& [k, v] : val.metrics()) want[k] = v;
  for (const char* key : {"loss/policy", "loss/value", "policy/entropy_avg", "policy/approxkl_avg",
                          "val/clipfrac_avg"}) {
    ASSERT_TRUE(got.metrics.count(key)) << key;
    EXPECT_DOUBLE_EQ(got.metrics.at(key), want.at(key)) << key;
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
double score_logp_covariance(PpoFixture& f) {
  const std::vector<float> logp =
      Engine(f.cfg, f.models->policy_weights(), f.be, f.pool, f.exec).score(f.mb.batch).logp;
  const SequenceRows rows(f.mb.batch);
  double mean = 0.0;
  for (float r : f.mb.rewards) mean += r / static_cast<double>(f.mb.rewards.size());
  double cov = 0.0;
  for (int64_t s = 0; s < rows.num_sequences(); ++s) {
    double sum = 0.0;
    for (int64_t t = rows.begin[s]; t < rows.begin[s + 1]; ++t)
      sum += rows.weight[static_cast<size_t>(t)] * logp[static_cast<size_t>(t)];
    cov += (f.mb.rewards[static_cast<size_t>(s)] - mean) * sum;
  }
  return cov;
}

TEST(PpoStep, StepsMoveThePolicyTowardHigherScores) {
  PpoFixture f(0.0f, KlEstimator::k1, InitStyle::hf);
  const double before = score_logp_covariance(f);
  double first_value_loss = 0.0, last_value_loss = 0.0;
  for (int i = 0; i < 4; ++i) {
    const StepResult r = f.step();
    (i == 0 ? first_value_loss : last_value_loss) = r.metrics.at("loss/value");
    DataParallel& policy = f.models->policy();
    DataParallel& value = f.models->value();
    policy.clip_to(1.0, policy.grad_norm());
    value.clip_to(1.0, value.grad_norm());
    f.models->policy().update(f.models->policy_weights(), 1e-3f);
    f.models->value().update(f.models->value_weights(), 1e-3f);
  }
  EXPECT_GT(score_logp_covariance(f), before);
  EXPECT_LT(last_value_loss, first_value_loss);
}

}  // namespace
}  // namespace sbp
