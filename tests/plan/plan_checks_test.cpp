// The planner rejects what a real step rejects: both run the step runner against a Backend whose
// every operation checks its arguments in the base class (backend/backend.h), so a model shape
// the CPU kernels would refuse is refused by `plan` too, with the same error, instead of being
// planned. (Config files never get this far — ModelConfig::validate refuses these shapes with a
// message naming the file — so the configs are built in code.)
#include <gtest/gtest.h>

#include <string>

#include "backend/cpu/cpu_backend.h"
#include "plan/plan_step.h"
#include "step/model_set.h"
#include "step/step_runner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

// The message of the ShapeError `f` throws ("" if none).
template <class F>
std::string shape_error(F f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  return "";
}

std::string real_step(const ModelConfig& cfg, const ObjectiveSetup& s, const ExecConfig& exec,
                      const StepBatches& step) {
  return shape_error([&] {
    Ledger ledger;
    const std::unique_ptr<Backend> backend_ = test::backend();
    Backend& be = *backend_;
    Pool pool(ledger, be);
    ModelSet models(s, cfg, pool, be, ModelSetOptions{});
    init_parameters(models.policy_weights(), 1, InitStyle::hf);
    if (models.has_reference()) init_parameters(models.reference_weights(), 2, InitStyle::hf);
    StepRunner(s, models.views(), be, pool, exec).run(step);
  });
}

std::string planned_step(const ModelConfig& cfg, const ObjectiveSetup& s, const ExecConfig& exec,
                         const StepBatches& step) {
  return shape_error([&] { plan_step(cfg, s, exec, step, StepMemoryOptions{}); });
}

TEST(PlanChecks, PlanRejectsTheShapesTheCpuRejects) {
  ModelConfig odd_head = preset_config("tiny-qwen3");
  odd_head.head_dim = 15;  // rotary embeddings rotate pairs: an odd head_dim has no rope table
  ModelConfig bad_gqa = preset_config("tiny-qwen3");
  bad_gqa.num_key_value_heads = 3;  // 4 query heads cannot share 3 kv heads
  for (const ModelConfig& cfg : {odd_head, bad_gqa}) {
    for (const ObjectiveKind kind : {ObjectiveKind::sft, ObjectiveKind::dpo}) {
      ObjectiveSetup s;
      s.kind = kind;
      const StepBatches step = planning_step(kind, 2, 24);
      const std::string real = real_step(cfg, s, parse_mode("stream"), step);
      const std::string plan = planned_step(cfg, s, parse_mode("stream"), step);
      EXPECT_FALSE(real.empty()) << objective_name(kind) << " h=" << cfg.head_dim;
      EXPECT_EQ(plan, real) << objective_name(kind) << " h=" << cfg.head_dim;
    }
  }
  // The unspoiled config plans and runs.
  const ModelConfig good = preset_config("tiny-qwen3");
  EXPECT_EQ(real_step(good, ObjectiveSetup{}, parse_mode("stream"),
                      planning_step(ObjectiveKind::sft, 2, 24)),
            "");
  EXPECT_EQ(planned_step(good, ObjectiveSetup{}, parse_mode("stream"),
                         planning_step(ObjectiveKind::sft, 2, 24)),
            "");
}

}  // namespace
}  // namespace sbp
