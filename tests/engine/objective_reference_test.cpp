// The reference model: a real forward of its own weights (equal to Engine::score on them, also
// when loaded from a checkpoint directory), with no gradient state and a memory peak of one
// layer's working set and one head chunk beyond its weights.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/gradcheck.h"
#include "engine/objective_step.h"
#include "engine/reference_model.h"
#include "model/checkpoint_io.h"
#include "support/test_support.h"

namespace sbp {
namespace {

TEST(ReferenceModel, EqualsScoringItsOwnWeights) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ParameterSet policy(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(policy, 2, InitStyle::test, 0.2f);
  const ParameterSet ref_w = make_reference_weights(cfg, policy, pool, 0.05f, 9);
  ObjectiveSetup s;
  s.kind = ObjectiveKind::dpo;
  const Batch batch = random_objective_batch(s, cfg.vocab_size, 50, 4, 1);
  const std::vector<float> want =
      Engine(cfg, ref_w, be, pool, parse_mode("base")).score(batch).logp;
  const std::vector<float> of_policy =
      Engine(cfg, policy, be, pool, parse_mode("base")).score(batch).logp;
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = 9;
  exec.head_chunk = 7;
  ReferenceModel ref(cfg, ref_w, be, pool, exec);
  const std::vector<float> got = ref.target_logp(batch);
  EXPECT_LT(test::rel_err(got.data(), want.data(), batch.size()), 1e-5);
  // ... and not the policy's log-probs (the reference implementation's shortcut).
  EXPECT_GT(test::rel_err(got.data(), of_policy.data(), batch.size()), 1e-3);

  // Loaded from a Hugging Face directory: the same numbers.
  test::TempDir dir;
  save_model_dir(dir.file("ref"), cfg, ref_w, DType::F32);
  auto loaded = ReferenceModel::load(dir.file("ref"), be, pool, exec);
  const std::vector<float> again = loaded->target_logp(batch);
  EXPECT_LT(test::rel_err(again.data(), want.data(), batch.size()), 1e-5);
}

TEST(ReferenceModel, HoldsNoGradientStateAndOneHeadChunk) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 2, InitStyle::test, 0.2f);
  const int64_t T = 96, c = 16, hc = 8, d = cfg.hidden_size, V = cfg.vocab_size;
  const Batch batch = random_batch(V, T, 3, 4, false);
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = c;
  exec.head_chunk = hc;
  ReferenceModel ref(cfg, w, be, pool, exec);
  const int64_t weights = ledger.live();
  ledger.reset_peak();
  ref.target_logp(batch);
  const MemoryBreakdown& at_peak = ledger.peak_breakdown();
  EXPECT_EQ(ledger.live(), weights);  // everything released
  EXPECT_EQ(ledger.category_peak(Category::grads), 0);
  EXPECT_EQ(ledger.category_peak(Category::optimizer), 0);
  EXPECT_EQ(ledger.category_peak(Category::grad_buffers), 0);
  EXPECT_EQ(ledger.category_peak(Category::logits), hc * V * 4);  // one head block
  // Two (T, d) hidden states, never one per layer.
  EXPECT_LE(ledger.category_peak(Category::checkpoints), 2 * T * d * 4);
  // One layer's K/V (2 T G h) plus one chunk's working set, bounded loosely by 16 c (d + F)
  // floats, or one head block's normed rows.
  const int64_t Gh = cfg.num_key_value_heads * cfg.head_dim;
  const int64_t layer = 2 * T * Gh * 4 + 16 * c * (d + cfg.intermediate_size) * 4;
  EXPECT_LE(at_peak[Category::layer_workspace], layer);
  EXPECT_LE(ledger.peak() - weights, 2 * T * d * 4 + layer + hc * V * 4 + 64 * T);
}

TEST(ReferenceModel, GrpoWithoutKlNeedsNoReference) {
  const ModelConfig cfg = preset_config("tiny-qwen2");
  Ledger ledger;
  Pool pool(ledger);
  CpuBackend be;
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 2, InitStyle::test, 0.2f);
  ObjectiveSetup s;
  s.kind = ObjectiveKind::grpo;
  s.grpo.beta = 0.0;
  s.group_size = 2;
  EXPECT_FALSE(s.needs_reference());
  const Batch batch = random_objective_batch(s, cfg.vocab_size, 30, 4, 2);
  ObjectiveModels models{cfg, w};  // no reference model at all
  const StepConstants k = make_step_constants(s, models, batch, be, pool, parse_mode("stream"), 1);
  ParameterSet g(cfg, pool, Category::grads, DType::F32, true);
  const StepOutcome out = run_objective_step(s, models, k, batch, be, pool, parse_mode("stream"), g);
  EXPECT_TRUE(std::isfinite(out.loss));
  EXPECT_EQ(out.metrics.count("kl"), 0u);
}

}  // namespace
}  // namespace sbp
