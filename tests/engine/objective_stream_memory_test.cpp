// Memory of the objectives' steps, from the ledger: in stream mode the `logits` category never
// holds more than one head block (c_h x V fp32) — also for DPO's and ORPO's extra pre-pass, KTO's
// KL passes, GRPO's entropy, PPO's two models and its rollout, and the reference model's forward — while `head: full` holds
// (T, V). And a
// shape-only run (meta backend, non-materialising pool: what `streambp plan` runs) records
// exactly the allocations of the real step.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/meta/meta_backend.h"
#include "check/random_batches.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Step {
  int64_t peak = 0, logits_peak = 0;
  MemoryBreakdown at_peak;
};

Step measure(const ObjectiveSetup& s, const ModelConfig& cfg, const MicroBatch& mb,
             const ExecConfig& exec, bool meta) {
  Ledger ledger;
  const std::unique_ptr<Backend> cpu = test::backend();
  MetaBackend shapes;
  Backend& be = meta ? static_cast<Backend&>(shapes) : *cpu;
  Pool pool(ledger, be);
  ModelSet models(s, cfg, pool, be, ModelSetOptions{});
  if (!meta) {
    init_parameters(models.policy_weights(), 1, InitStyle::test, 0.2f);
    if (models.has_reference())
      init_parameters(models.reference_weights(), 2, InitStyle::test, 0.2f);
    if (models.has_value()) init_parameters(models.value_weights(), 3, InitStyle::test, 0.2f);
  }
  ledger.reset_peak();
  StepRunner(s, models.views(), be, pool, exec).run(StepBatches::whole({mb}));
  return Step{ledger.peak(), ledger.category_peak(Category::logits), ledger.peak_breakdown()};
}

TEST(ObjectiveMemory, StreamHoldsOneHeadBlockOfLogits) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  const int64_t T = 120, V = cfg.vocab_size, hc = 16;
  for (const ObjectiveTraits* row : all_objectives()) {
    const ObjectiveKind kind = row->kind;
    ObjectiveSetup s;
    s.kind = kind;
    s.grpo.beta = 0.04;
    s.grpo.entropy_coef = 0.01;
    const MicroBatch batch =
        cli::random_micro_batch(kind, 4, cli::random_objective_batch(kind, 4, V, T, 4, 6), 4);
    ExecConfig stream = parse_mode("stream");
    stream.layer_chunk = 32;
    stream.head_chunk = hc;
    const Step st = measure(s, cfg, batch, stream, false);
    EXPECT_EQ(st.logits_peak, hc * V * 4) << objective_name(kind);
    const Step base = measure(s, cfg, batch, parse_mode("checkpoint"), false);
    EXPECT_EQ(base.logits_peak, T * V * 4) << objective_name(kind);
    EXPECT_LT(st.peak, base.peak) << objective_name(kind);
    // The planner's view: the same allocations, without data.
    const Step plan = measure(s, cfg, batch, stream, true);
    EXPECT_EQ(plan.peak, st.peak) << objective_name(kind);
    EXPECT_EQ(plan.logits_peak, st.logits_peak) << objective_name(kind);
    for (int c = 0; c < kNumCategories; ++c)
      EXPECT_EQ(plan.at_peak.bytes[static_cast<size_t>(c)],
                st.at_peak.bytes[static_cast<size_t>(c)])
          << objective_name(kind) << " " << category_name(static_cast<Category>(c));
  }
}

}  // namespace
}  // namespace sbp
