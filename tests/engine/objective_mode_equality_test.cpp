// Every execution mode gives base's loss and gradients (fp32, 1e-5 relative) for DPO (each loss
// type), ORPO, KTO, GRPO (each loss_type, with and without the reference model, old log-probs and an
// entropy bonus) and PPO (policy and value model), for chunk sizes 1, 7, T/3, T and sizes that
// do not divide T, and two segment layouts each, through the step runner `train` runs. The
// reference model's forward (and PPO's rollout) runs in each mode too; the step's given
// constants (rewards, sampling log-probs, PPO's old values) are made once.
#include <gtest/gtest.h>

#include <cmath>

#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Case {
  std::string name;
  const char* preset;
  cli::GradcheckOptions options;  // objective, group size, noise
  std::vector<int64_t> segments;  // two layouts
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](std::string name, const char* preset, cli::GradcheckOptions o,
                 std::vector<int64_t> segs) {
    out.push_back({std::move(name), preset, o, segs});
  };
  cli::GradcheckOptions dpo;
  ObjectiveSetup& d = dpo.objective;
  d.kind = ObjectiveKind::dpo;
  d.dpo.label_smoothing = 0.1;
  d.dpo.beta = 0.5;
  add("dpo_sigmoid_smoothing", "tiny-qwen3", dpo, {2, 6});
  d.dpo.label_smoothing = 0.0;
  d.dpo.loss_type = DpoLoss::hinge;
  d.dpo.beta = 0.05;
  add("dpo_hinge", "tiny-qwen2", dpo, {4, 2});
  d.dpo.loss_type = DpoLoss::ipo;
  d.dpo.beta = 0.1;
  add("dpo_ipo", "tiny-llama", dpo, {4, 6});

  cli::GradcheckOptions orpo;
  orpo.objective.kind = ObjectiveKind::orpo;
  orpo.objective.orpo.beta = 0.5;
  add("orpo", "tiny-qwen3", orpo, {2, 6});
  orpo.objective.orpo.beta = 2.0;
  add("orpo_tied", "tiny-qwen2", orpo, {4, 8});

  cli::GradcheckOptions simpo;
  simpo.objective.kind = ObjectiveKind::simpo;
  simpo.objective.simpo = {.beta = 2.0, .gamma = 1.0, .label_smoothing = 0.1, .cpo_alpha = 0.5};
  add("simpo", "tiny-llama", simpo, {2, 6});

  cli::GradcheckOptions kto;
  kto.objective.kind = ObjectiveKind::kto;
  kto.objective.kto.beta = 0.5;
  add("kto", "tiny-qwen3", kto, {3, 6});
  kto.objective.kto.desirable_weight = 1.33;
  kto.objective.kto.undesirable_weight = 0.7;
  add("kto_weighted_tied", "tiny-qwen2", kto, {2, 5});

  cli::GradcheckOptions grpo;
  ObjectiveSetup& g = grpo.objective;
  g.kind = ObjectiveKind::grpo;
  grpo.group_size = 3;
  g.grpo.beta = 0.04;
  g.grpo.epsilon_high = 0.28;
  for (GrpoLoss lt : {GrpoLoss::grpo, GrpoLoss::bnpo, GrpoLoss::dr_grpo, GrpoLoss::dapo}) {
    g.grpo.loss_type = lt;
    add(std::string("grpo_") + grpo_loss_name(lt),
        lt == GrpoLoss::bnpo ? "tiny-qwen2" : "tiny-qwen3", grpo, {6, 3});
  }
  // beta = 0 (no reference model), old = current detached, batch scaling, entropy bonus.
  g.grpo.loss_type = GrpoLoss::dapo;
  g.grpo.beta = 0.0;
  g.grpo.entropy_coef = 0.05;
  grpo.old_logp_noise = 0.0f;
  g.scale_rewards = ScaleRewards::batch;
  add("grpo_detached_entropy", "tiny-qwen3", grpo, {6, 9});

  cli::GradcheckOptions ppo;
  ObjectiveSetup& p = ppo.objective;
  p.kind = ObjectiveKind::ppo;
  p.ppo.entropy_coef = 0.01;
  add("ppo", "tiny-qwen3", ppo, {3, 5});
  p.ppo.entropy_coef = 0.0;
  p.rollout.kl_estimator = KlEstimator::k3;
  p.rollout.gamma = 0.9;
  add("ppo_k3_tied", "tiny-qwen2", ppo, {2, 4});
  return out;
}

class ObjectiveModeEquality : public ::testing::TestWithParam<size_t> {};

TEST_P(ObjectiveModeEquality, EveryModeMatchesBase) {
  const Case c = cases()[GetParam()];
  const ModelConfig cfg = preset_config(c.preset);
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 7, InitStyle::test, 0.2f);
  const int64_t T = 41;
  for (int64_t segments : c.segments) {
    const Batch batch = cli::random_objective_batch(c.options.objective.kind, c.options.group_size,
                                                    cfg.vocab_size, T, segments, 3 + segments);
    cli::GradcheckOptions opts = c.options;
    opts.modes = test::equality_modes(T);
    opts.seed = 17;
    const cli::GradcheckResult r = cli::run_gradcheck(*backend_, cfg, w, batch, opts);
    EXPECT_TRUE(std::isfinite(r.base_loss)) << c.name;
    EXPECT_NE(r.base_loss, 0.0) << c.name;
    for (const cli::ModeResult& m : r.modes) {
      // The loss is compared on its natural scale: GRPO/PPO losses are weighted means of O(1)
      // per-token terms whose advantages sum to ~0 per group, so the total can be far smaller
      // than its terms and a relative error of it would measure that cancellation, not the
      // engine (the gradients, checked strictly below, have no such cancellation).
      EXPECT_LT(std::fabs(m.loss - r.base_loss), 1e-5 * std::max(1.0, std::fabs(r.base_loss)))
          << c.name << " segments=" << segments << " " << m.mode << " lc=" << m.layer_chunk
          << " hc=" << m.head_chunk << " base loss " << r.base_loss << " loss " << m.loss;
      for (const auto& [name, err] : m.per_param)
        EXPECT_LT(err, 1e-5) << c.name << " segments=" << segments << " " << m.mode
                             << " lc=" << m.layer_chunk << " hc=" << m.head_chunk << " " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, ObjectiveModeEquality,
                         ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return cases()[i.param].name;
                         });

}  // namespace
}  // namespace sbp
