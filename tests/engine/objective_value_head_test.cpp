// The value head ("score.weight", d -> 1) of PPO's value model: its forward equals the LM head's
// row of the same vector, its gradients (value loss through the whole trunk) pass directional
// finite differences, and value checkpoints load (Qwen3ForSequenceClassification layout).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "check/random_batches.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/checkpoint_io.h"
#include "model/value_model_io.h"
#include "objective/ppo.h"
#include "objective/sft.h"
#include "support/test_support.h"

namespace sbp {
namespace {

TEST(ValueHead, ParameterLayout) {
  ModelConfig cfg = preset_config("tiny-qwen3");
  const std::vector<ParamSpec> lm = parameter_specs(cfg);
  const std::vector<ParamSpec> v = parameter_specs(cfg, ModelHead::value);
  EXPECT_EQ(lm.back().name, "lm_head.weight");
  EXPECT_EQ(v.back().name, "score.weight");
  EXPECT_EQ(v.back().shape, (Shape{1, cfg.hidden_size}));
  EXPECT_EQ(v.size(), lm.size());
  for (const ParamSpec& s : v) EXPECT_NE(s.name, "lm_head.weight");
  cfg.tie_word_embeddings = true;  // a tied config: the value model just adds score.weight
  EXPECT_EQ(parameter_specs(cfg, ModelHead::value).size(), parameter_specs(cfg).size() + 1);
}

TEST(ValueHead, ValuesEqualTheLmHeadRowOfTheSameVector) {
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet lm(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(lm, 3, InitStyle::test, 0.2f);
  ParameterSet vm = make_value_parameters(cfg, pool, Category::weights, DType::F32, false);
  const int64_t k = 17, d = cfg.hidden_size;
  for (size_t i = 0; i < vm.size(); ++i) {
    const Tensor& dst = vm.tensor(i);
    const Tensor src = vm.name(i) == "score.weight" ? lm.get("lm_head.weight").slice_rows(k, k + 1)
                                                    : lm.get(vm.name(i));
    be.copy(dst, src);
  }
  const Batch batch = cli::random_batch(cfg.vocab_size, 40, 3, 5, false);
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = 7;
  exec.head_chunk = 6;
  const std::vector<float> v = Engine(cfg, vm, be, pool, exec).values(batch);
  std::vector<int64_t> rows(static_cast<size_t>(batch.size()));
  for (int64_t t = 0; t < batch.size(); ++t) rows[static_cast<size_t>(t)] = t;
  const std::vector<float> logits = Engine(cfg, lm, be, pool, exec).logits_at(batch, rows);
  std::vector<float> want;
  for (int64_t t = 0; t < batch.size(); ++t)
    want.push_back(logits[static_cast<size_t>(t * cfg.vocab_size + k)]);
  EXPECT_LT(test::rel_err(v.data(), want.data(), batch.size()), 1e-5);
  (void)d;
  // An LM objective on a value model (and the reverse) is refused up front.
  ParameterSet g = make_value_parameters(cfg, pool, Category::grads, DType::F32, true);
  SftObjective sft(batch, 1.0);
  EXPECT_THROW(Engine(cfg, vm, be, pool, exec).forward_backward(batch, sft, g), InputError);
}

// L_v as a function of the value model's weights, forward only.
double value_loss(const ModelConfig& cfg, const ParameterSet& vm, Backend& be, Pool& pool,
                  const Batch& b, const std::vector<float>& ret, const std::vector<float>& vold,
                  const PpoConfig& pc) {
  const std::vector<float> v = Engine(cfg, vm, be, pool, parse_mode("stream")).values(b);
  PpoValueObjective obj(b, ret, vold, pc);
  std::vector<float> dv(v.size());
  TokenChunk in;
  in.value = v;
  TokenChunkGrads out;
  out.dvalue = dv;
  host_chunks(obj.route()).grads(in, out);
  return obj.loss();
}

TEST(ValueHead, GradientsPassDirectionalFiniteDifferences) {
  const ModelConfig cfg = preset_config("tiny-qwen2");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet vm = make_value_parameters(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(vm, 8, InitStyle::test, 0.2f);
  const Batch b = cli::random_objective_batch(ObjectiveKind::ppo, 0, cfg.vocab_size, 36, 3, 4);
  // Returns far from the values and old values far from both, so no token sits at a clip kink
  // under the small steps below; cliprange_value large enough that most tokens are unclipped.
  const std::vector<float> v0 = Engine(cfg, vm, be, pool, parse_mode("base")).values(b);
  std::vector<float> ret, vold;
  Rng rng(3);
  for (float v : v0) {
    ret.push_back(v + 2.0f + rng.normal());
    vold.push_back(v + (rng.uniform() < 0.5 ? 0.2f : 3.0f));
  }
  PpoConfig pc;
  pc.cliprange_value = 1.0;
  ParameterSet g = make_value_parameters(cfg, pool, Category::grads, DType::F32, true);
  PpoValueObjective obj(b, ret, vold, pc);
  Engine(cfg, vm, be, pool, parse_mode("stream")).forward_backward(b, obj, g);
  for (size_t i = 0; i < vm.size(); ++i) {
    const Tensor& p = vm.tensor(i);
    const std::vector<float> gi = download_f32(g.tensor(i));
    double gnorm = 0;
    for (float x : gi) gnorm += static_cast<double>(x) * x;
    gnorm = std::sqrt(gnorm);
    ASSERT_GT(gnorm, 0.0) << vm.name(i);
    const std::vector<float> saved = download_f32(p);
    std::vector<float> moved(saved.size());
    const double h = 1e-2;
    for (size_t j = 0; j < saved.size(); ++j)
      moved[j] = saved[j] + static_cast<float>(h * gi[j] / gnorm);
    upload_f32(p, moved);
    const double up = value_loss(cfg, vm, be, pool, b, ret, vold, pc);
    for (size_t j = 0; j < saved.size(); ++j)
      moved[j] = saved[j] - static_cast<float>(h * gi[j] / gnorm);
    upload_f32(p, moved);
    const double down = value_loss(cfg, vm, be, pool, b, ret, vold, pc);
    upload_f32(p, saved);
    EXPECT_NEAR((up - down) / (2 * h), gnorm, 2e-2 * gnorm + 1e-5) << vm.name(i);
  }
}

TEST(ValueHead, LoadsAValueCheckpoint) {
  const std::string dir = test::source_dir() + "/tests/fixtures/objectives/models/value";
  const std::string policy_dir = test::source_dir() + "/tests/fixtures/objectives/models/policy";
  const ModelConfig cfg = load_config(dir);
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  ParameterSet vm = make_value_parameters(cfg, pool, Category::weights, DType::F32, false);
  load_value_weights(dir, cfg, vm);
  const Tensor& score = vm.get("score.weight");
  double ss = 0;
  for (float x : download_f32(score)) ss += std::fabs(x);
  EXPECT_GT(ss, 0.0);
  // A causal-LM checkpoint has no value head: an error naming it, unless asked to draw one.
  try {
    load_value_weights(policy_dir, cfg, vm);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("score.weight"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(load_value_weights(policy_dir, cfg, vm, /*init_missing_head=*/true, 1));
  EXPECT_THROW(load_value_weights(test::source_dir() + "/tests/fixtures", cfg, vm), InputError);
}

}  // namespace
}  // namespace sbp
