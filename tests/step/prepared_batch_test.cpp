// Each micro-batch is prepared for the engine once (engine/prepared_batch.h: validation, index
// tables, rope table) and every pass over it shares that: DPO's reference scoring and policy
// pass, GRPO's reference scoring and policy pass, PPO's three rollout passes and two updates.
// One build per micro-batch per distinct model config, counted as the rope tables the backend
// makes; and an engine refuses a prepared batch built for another model.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/prepared_batch.h"
#include "step/model_set.h"
#include "step/step_runner.h"

namespace sbp {
namespace {

// The CPU backend, counting the rope tables it builds (one per prepared batch for a model
// without Gemma's sliding layers). CpuBackend's own rope_table_impl is private, so the table
// is built by a second CPU backend on the same host bytes.
class RopeCountingBackend final : public CpuBackend {
 public:
  int64_t rope_tables = 0;

 private:
  void rope_table_impl(const Tensor& table, std::span<const float> inv_freq,
                       float attention_factor, int64_t first_position) override {
    ++rope_tables;
    Tensor same_bytes = table;
    same_bytes.memory = &builder_;
    builder_.rope_table(same_bytes, inv_freq, attention_factor, first_position);
  }
  CpuBackend builder_;
};

struct Counted {
  int64_t micro_batches = 0;
  int64_t rope_tables = 0;  // built during the step
};

// One step of `kind` over `micro` micro-batches on the tiny Qwen3 (policy, reference and value
// model as the trainer holds them); value_cfg: a value model of another shape, else the
// policy's.
Counted count_step(ObjectiveKind kind, int64_t micro, const ModelConfig* value_cfg = nullptr) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  RopeCountingBackend be;
  Pool pool(ledger, be);
  ObjectiveSetup setup;
  setup.kind = kind;
  setup.grpo.beta = 0.04;  // GRPO with its reference pass
  ModelSet models(setup, cfg, pool, be, ModelSetOptions{}, nullptr, value_cfg);
  init_parameters(models.policy_weights(), 1, InitStyle::test, 0.2f);
  if (models.has_reference()) init_parameters(models.reference_weights(), 2, InitStyle::test, 0.2f);
  if (models.has_value()) init_parameters(models.value_weights(), 3, InitStyle::test, 0.2f);
  std::vector<MicroBatch> mbs;
  for (int64_t i = 0; i < micro; ++i) {
    const uint64_t seed = 10 + static_cast<uint64_t>(i);
    const Batch b = cli::random_objective_batch(kind, 2, cfg.vocab_size, 30, 4, seed);
    mbs.push_back(cli::random_micro_batch(kind, 2, b, seed));
  }
  StepRunner runner(setup, models.views(), be, pool, parse_mode("stream"));
  const int64_t before = be.rope_tables;
  runner.run(StepBatches::whole(std::move(mbs)));
  return {micro, be.rope_tables - before};
}

TEST(PreparedBatch, OneBuildPerMicroBatchForEveryObjective) {
  // Passes per micro-batch before the tables were shared: sft 1, dpo 2, grpo 2, ppo 5.
  for (const ObjectiveKind kind :
       {ObjectiveKind::sft, ObjectiveKind::dpo, ObjectiveKind::grpo, ObjectiveKind::ppo}) {
    const Counted c = count_step(kind, 3);
    EXPECT_EQ(c.rope_tables, c.micro_batches) << static_cast<int>(kind);
  }
}

TEST(PreparedBatch, AValueModelWithAnotherRopeGetsItsOwn) {
  ModelConfig value_cfg = preset_config("tiny-qwen3");
  value_cfg.rope_theta *= 2.0;  // same shapes, other rotation: the tables cannot be shared
  const Counted c = count_step(ObjectiveKind::ppo, 2, &value_cfg);
  EXPECT_EQ(c.rope_tables, 2 * c.micro_batches);  // policy + reference share, value its own
}

TEST(PreparedBatch, ServesOnlyTheConfigBackendAndPoolItWasBuiltFor) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  CpuBackend be, other_be;
  Pool pool(ledger, be), other_pool(ledger, be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 4, InitStyle::test, 0.2f);
  const Batch b = cli::random_objective_batch(ObjectiveKind::sft, 0, cfg.vocab_size, 20, 2, 5);
  const PreparedBatch prep(cfg, be, pool, b);
  EXPECT_TRUE(prep.serves(cfg, be, pool));
  EXPECT_FALSE(prep.serves(cfg, other_be, pool));
  EXPECT_FALSE(prep.serves(cfg, be, other_pool));
  ModelConfig rope = cfg, vocab = cfg;
  rope.rope_theta *= 2.0;
  vocab.vocab_size += 1;
  EXPECT_FALSE(prep.serves(rope, be, pool));
  EXPECT_FALSE(prep.serves(vocab, be, pool));

  // The same scores as the call that prepares its own; a mismatched one is an internal error.
  Engine engine(cfg, w, be, pool, parse_mode("stream"));
  EXPECT_EQ(engine.score(prep).logp, engine.score(b).logp);
  Engine other(rope, w, be, pool, parse_mode("stream"));
  EXPECT_THROW(other.score(prep), ShapeError);
}

}  // namespace
}  // namespace sbp
