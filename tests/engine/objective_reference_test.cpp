// The reference model: a real forward of its own weights (equal to Engine::score on them, also
// when loaded from a checkpoint directory), which the step runner scores against — never the
// policy's log-probs — with no gradient state and a memory peak of one layer's working set and
// one head chunk beyond its weights.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "engine/engine.h"
#include "model/checkpoint_io.h"
#include "objective/sequence_rows.h"
#include "step/step_runner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

TEST(ReferenceModel, EqualsScoringItsOwnWeights) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet policy(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(policy, 2, InitStyle::test, 0.2f);
  const ParameterSet ref_w = cli::make_reference_weights(cfg, policy, pool, 0.05f, 9);
  const Batch batch = cli::random_objective_batch(ObjectiveKind::dpo, 0, cfg.vocab_size, 50, 4, 1);
  const std::vector<float> want =
      Engine(cfg, ref_w, be, pool, parse_mode("base")).score(batch).logp;
  const std::vector<float> of_policy =
      Engine(cfg, policy, be, pool, parse_mode("base")).score(batch).logp;
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = 9;
  exec.head_chunk = 7;
  const std::vector<float> got = Engine(cfg, ref_w, be, pool, exec).score(batch).logp;
  EXPECT_LT(test::rel_err(got.data(), want.data(), batch.size()), 1e-5);
  // ... and not the policy's log-probs (the reference implementation's shortcut).
  EXPECT_GT(test::rel_err(got.data(), of_policy.data(), batch.size()), 1e-3);

  // Loaded from a Hugging Face directory: the same numbers.
  test::TempDir dir;
  save_model_dir(dir.file("ref"), cfg, ref_w, DType::F32);
  const ModelConfig loaded_cfg = load_config(dir.file("ref"));
  ParameterSet loaded(loaded_cfg, pool, Category::weights, DType::F32, false);
  load_weights(dir.file("ref"), loaded_cfg, loaded);
  const std::vector<float> again = Engine(loaded_cfg, loaded, be, pool, exec).score(batch).logp;
  EXPECT_LT(test::rel_err(again.data(), want.data(), batch.size()), 1e-5);

  // The step runner's DPO step scores against those weights: TRL's rewards/chosen, beta times
  // the policy's minus the reference's summed completion log-probs, from the two forwards.
  ObjectiveSetup dpo;
  dpo.kind = ObjectiveKind::dpo;
  DataParallel grads(single_process(), 0, cfg, ModelHead::lm, pool, be, nullptr);
  StepModels models;
  models.policy = {{&cfg, &policy}, &grads};
  models.reference = {&cfg, &ref_w};
  MicroBatch mb;
  mb.batch = batch;
  const StepResult r = StepRunner(dpo, models, be, pool, exec).run(StepBatches::whole({mb}));
  const SequenceRows rows(batch);
  double expected = 0.0;
  for (int64_t t = 0; t < rows.num_rows(); ++t) {
    const size_t i = static_cast<size_t>(t);
    if (rows.segment[i] % 2 == 0)
      expected += rows.weight[i] * (static_cast<double>(of_policy[i]) - want[i]);
  }
  expected *= dpo.dpo.beta / static_cast<double>(rows.num_sequences() / 2);
  EXPECT_GT(std::fabs(expected), 1e-3);
  EXPECT_NEAR(r.metrics.at("rewards/chosen"), expected, 1e-5 * std::max(1.0, std::fabs(expected)));
}

TEST(ReferenceModel, HoldsNoGradientStateAndOneHeadChunk) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 2, InitStyle::test, 0.2f);
  const int64_t T = 96, c = 16, hc = 8, d = cfg.hidden_size, V = cfg.vocab_size;
  const Batch batch = cli::random_batch(V, T, 3, 4, false);
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = c;
  exec.head_chunk = hc;
  Engine ref(cfg, w, be, pool, exec);
  const int64_t weights = ledger.live();
  ledger.reset_peak();
  ref.score(batch);
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
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 2, InitStyle::test, 0.2f);
  ObjectiveSetup s;
  s.kind = ObjectiveKind::grpo;
  s.grpo.beta = 0.0;
  EXPECT_FALSE(s.needs_reference());
  const Batch batch = cli::random_objective_batch(s.kind, 2, cfg.vocab_size, 30, 4, 2);
  DataParallel grads(single_process(), 0, cfg, ModelHead::lm, pool, be, nullptr);
  StepModels models;  // no reference model at all
  models.policy = {{&cfg, &w}, &grads};
  const StepResult out =
      StepRunner(s, models, be, pool, parse_mode("stream"))
          .run(StepBatches::whole({cli::random_micro_batch(s.kind, 2, batch, 1)}));
  EXPECT_TRUE(std::isfinite(out.loss));
  EXPECT_EQ(out.metrics.count("kl"), 0u);
}

}  // namespace
}  // namespace sbp
