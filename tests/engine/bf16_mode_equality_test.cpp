// Exactness in bf16 (`gradcheck --precision bf16`): for SFT, DPO, GRPO and PPO, every execution
// mode in bf16 (bf16 weights, activations, checkpoints, K/V and head blocks; fp32 accumulation
// and fp32 gradients) against base in bf16 on the same batch. The yardstick is base(bf16)
// against base(fp32): what bf16 rounding alone moves each gradient by. A mode that computed a
// different function would be as far from base(bf16) as that or farther; StreamBP only reorders
// fp32 sums and recomputes bf16 activations from identical bf16 inputs, so it must stay below:
//
//     for every parameter:  d(mode_bf16, base_bf16) <= d(base_bf16, base_fp32)
//
// (d = max |a - b| / max |b| over the tensor). The test also requires the yardstick to be that
// of bf16 (between 2^-9 and 0.5: not zero, which would mean nothing was rounded, nor O(1)) and
// prints the worst ratio, which shows the margin.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Case {
  const char* name;
  const char* preset;
  ObjectiveKind kind;
};

class Bf16ModeEquality : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16ModeEquality, EveryModeIsCloserToBaseThanBf16RoundingIs) {
  const Case c = GetParam();
  const ModelConfig cfg = preset_config(c.preset);
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 7, InitStyle::test, 0.2f);
  const int64_t T = 41;
  cli::GradcheckOptions opts;
  opts.objective.kind = c.kind;
  opts.objective.grpo.beta = 0.04;
  opts.objective.ppo.entropy_coef = 0.01;
  opts.group_size = 3;
  opts.precision = Precision::bf16;
  opts.modes = test::equality_modes(T);
  opts.seed = 17;
  const Batch batch =
      cli::random_objective_batch(c.kind, opts.group_size, cfg.vocab_size, T, 3, 5);
  const cli::GradcheckResult r = cli::run_gradcheck(*backend_, cfg, w, batch, opts);
  ASSERT_FALSE(r.rounding.empty());
  for (const auto& [name, rounding] : r.rounding) {
    EXPECT_GT(rounding, 1.0 / 512) << name;
    EXPECT_LT(rounding, 0.5) << name;
  }
  double worst = 0.0;
  for (const cli::ModeResult& m : r.modes) {
    for (const auto& [name, err] : m.per_param) {
      const double rounding = r.rounding.at(name);
      EXPECT_LE(err, rounding) << c.name << " " << m.mode << " lc=" << m.layer_chunk
                               << " hc=" << m.head_chunk << " " << name;
      worst = std::max(worst, err / rounding);
    }
  }
  std::printf("[bf16] %-5s worst d(mode, base bf16) / d(base bf16, base fp32) = %.3f\n", c.name,
              worst);
}

INSTANTIATE_TEST_SUITE_P(Objectives, Bf16ModeEquality,
                         ::testing::Values(Case{"sft", "tiny-qwen3", ObjectiveKind::sft},
                                           Case{"dpo", "tiny-qwen2", ObjectiveKind::dpo},
                                           Case{"grpo", "tiny-qwen3", ObjectiveKind::grpo},
                                           Case{"ppo", "tiny-llama", ObjectiveKind::ppo}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sbp
