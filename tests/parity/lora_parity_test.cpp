// Parity with PEFT (peft + transformers): tiny random base models with LoRA adapters as PEFT
// saves them, and what PEFT computes for them in float32 (SFT loss, per-token target log-probs,
// the gradient of every lora_A / lora_B), committed under tests/fixtures/lora by
// tools/hf_parity/make_lora_fixtures.py. The base model loads through the normal loading path,
// the adapter through read_lora_config + load_lora_weights (so a PEFT adapter loads into
// streambp), and every execution mode with several chunk sizes must give PEFT's numbers.
//
// Tolerance: as tests/parity/hf_parity_test.cpp (both sides fp32 on identical weights, only the
// summation order differs): 1e-5 relative, the error measure max|a-b|/max|b|.
//
// Saving: an adapter saved by save_lora_adapter reads back to the same tensors and config (the
// other direction, our file into PeftModel.from_pretrained, is checked by
// `make_lora_fixtures.py --check-load`, see docs/TRAINING.md).
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/engine.h"
#include "model/lora_io.h"
#include "model/lora_merge.h"
#include "parity/hf_fixture.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using namespace parity;  // NOLINT: the fixtures' helpers

constexpr double kTol = 1e-5;

const std::vector<std::string>& lora_fixtures() {
  static const std::vector<std::string> names = {"qwen3_all_linear", "llama_qv_rslora",
                                                 "qwen3_kv_down"};
  return names;
}

// A parity fixture with a PEFT adapter beside its model (tests/fixtures/lora/<name>/adapter).
struct LoraFixture : Fixture {
  explicit LoraFixture(const std::string& name)
      : Fixture(FixturePath{test::source_dir() + "/tests/fixtures/lora/" + name}),
        lc(read_lora_config(dir + "/adapter")),
        adapters(cfg, lc, pool, Category::weights, DType::F32, false) {
    load_lora_weights(dir + "/adapter", adapters);
  }
  LoraConfig lc;
  LoraSet adapters;
};

class LoraParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraParity, ConfigMatchesWhatPeftWasGiven) {
  LoraFixture f(GetParam());
  const json& want = f.expected["lora"];
  EXPECT_EQ(f.lc.r, want["r"].get<int64_t>());
  EXPECT_EQ(f.lc.alpha, want["lora_alpha"].get<double>());
  EXPECT_EQ(f.lc.use_rslora, want["use_rslora"].get<bool>());
  // Every adapter tensor has a reference gradient and every reference gradient a tensor.
  const auto grads = read_grads(f.dir + "/expected_grads.safetensors");
  EXPECT_EQ(grads.size(), f.adapters.size());
  for (size_t i = 0; i < f.adapters.size(); ++i) EXPECT_TRUE(grads.count(f.adapters.name(i)));
}

// One SFT step in every mode, the base frozen (no gradient buffers): loss, log-probs, every
// adapter gradient.
TEST_P(LoraParity, LossLogprobsAndAdapterGradientsMatchInEveryMode) {
  LoraFixture f(GetParam());
  const auto want_grads = read_grads(f.dir + "/expected_grads.safetensors");
  const std::vector<float> want_logp = flatten_logprobs(f.expected["logprobs"]);
  const double want_loss = f.expected["loss"].get<double>();
  Backend& be = f.be;
  LoraSet g(f.cfg, f.lc, f.pool, Category::grads, DType::F32, true);
  const ParameterSet frozen = ParameterSet::unallocated(f.cfg, ModelHead::lm);
  double worst_loss = 0.0, worst_logp = 0.0, worst_grad = 0.0;
  for (const ExecConfig& e : modes_for(f.batch.size())) {
    for (size_t i = 0; i < g.size(); ++i) be.fill(g.tensor(i), 0.0f);
    Engine engine(f.cfg, f.weights, be, f.pool, e);
    engine.set_lora(&f.adapters, &g);
    RecordingSft obj(f.batch, f.batch.loss_weight_sum());
    engine.forward_backward(f.batch, obj, frozen);
    const double loss_err = scalar_rel_err(obj.loss(), want_loss);
    const double logp_err = rel_err(per_sequence_logp(f.batch, obj.logp()), want_logp);
    EXPECT_LT(loss_err, kTol) << GetParam() << " " << describe(e);
    EXPECT_LT(logp_err, kTol) << GetParam() << " " << describe(e);
    worst_loss = std::max(worst_loss, loss_err);
    worst_logp = std::max(worst_logp, logp_err);
    for (size_t i = 0; i < g.size(); ++i) {
      const double err = rel_err(download_f32(g.tensor(i)), want_grads.at(g.name(i)));
      EXPECT_LT(err, kTol) << GetParam() << " " << describe(e) << " " << g.name(i);
      worst_grad = std::max(worst_grad, err);
    }
  }
  std::printf("[lora parity] %-18s loss %.2e  logp %.2e  adapter grads %.2e\n", GetParam().c_str(),
              worst_loss, worst_logp, worst_grad);
}

// Adapters off: the base model's numbers differ from PEFT's adapted ones (the fixture's
// adapters do something, so the match above is not the base model matching by accident).
TEST_P(LoraParity, AdaptersOffGiveADifferentLoss) {
  LoraFixture f(GetParam());
  Engine engine(f.cfg, f.weights, f.be, f.pool, mode("stream", 7, 5));
  const std::vector<float> base = per_sequence_logp(f.batch, engine.score(f.batch).logp);
  engine.set_lora(&f.adapters, nullptr);
  const std::vector<float> adapted = per_sequence_logp(f.batch, engine.score(f.batch).logp);
  const std::vector<float> want = flatten_logprobs(f.expected["logprobs"]);
  EXPECT_LT(rel_err(adapted, want), kTol);
  EXPECT_GT(rel_err(base, want), 1e-3);
}

// The merged checkpoint (W + s B A, what `streambp merge` writes) scores like base + adapter,
// i.e. like PEFT.
TEST_P(LoraParity, MergedModelScoresLikeBasePlusAdapter) {
  LoraFixture f(GetParam());
  merge_lora(f.weights, f.adapters, f.be);
  Engine engine(f.cfg, f.weights, f.be, f.pool, mode("stream", 7, 5));
  const std::vector<float> merged = per_sequence_logp(f.batch, engine.score(f.batch).logp);
  EXPECT_LT(rel_err(merged, flatten_logprobs(f.expected["logprobs"])), kTol);
}

TEST_P(LoraParity, SavedAdapterReadsBackExactly) {
  LoraFixture f(GetParam());
  test::TempDir tmp;
  const std::string out = tmp.file("adapter");
  save_lora_adapter(out, f.adapters, "tiny");
  const LoraConfig back = read_lora_config(out);
  EXPECT_EQ(back.r, f.lc.r);
  EXPECT_EQ(back.alpha, f.lc.alpha);
  EXPECT_EQ(back.use_rslora, f.lc.use_rslora);
  EXPECT_EQ(back.scale(), f.lc.scale());
  LoraSet again(f.cfg, back, f.pool, Category::weights, DType::F32, false);
  ASSERT_EQ(again.size(), f.adapters.size());
  load_lora_weights(out, again);
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again.name(i), f.adapters.name(i));
    EXPECT_EQ(test::bytes_of(again.tensor(i)), test::bytes_of(f.adapters.tensor(i)))
        << again.name(i);
  }
}

// Through the program: `score --adapter` gives PEFT's loss and adapter gradients, and the model
// `merge` writes scores the same (the merged checkpoint scores like base + adapter).
TEST_P(LoraParity, ScoreWithAdapterAndMergedModelGivePeftsLoss) {
  const std::string dir = test::source_dir() + "/tests/fixtures/lora/" + GetParam();
  const json expected = read_json(dir + "/expected.json");
  const double want = expected["loss"].get<double>();
  test::TempDir tmp;
  const std::string bin = test::streambp_binary();
  auto r = test::run_command(bin + " score --threads 1 --mode stream --layer-chunk 7 --model " +
                             dir + "/model --adapter " + dir + "/adapter --input " + dir +
                             "/tokens.json --json " + tmp.file("a.json") + " --grads " +
                             tmp.file("g.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(scalar_rel_err(read_json(tmp.file("a.json"))["loss"].get<double>(), want), kTol);
  const auto want_grads = read_grads(dir + "/expected_grads.safetensors");
  const auto got_grads = read_grads(tmp.file("g.safetensors"));
  ASSERT_EQ(got_grads.size(), want_grads.size());
  for (const auto& [name, g] : want_grads) {
    ASSERT_TRUE(got_grads.count(name)) << name;
    EXPECT_LT(rel_err(got_grads.at(name), g), kTol) << name;
  }
  r = test::run_command(bin + " merge --model " + dir + "/model --adapter " + dir +
                        "/adapter --out " + tmp.file("merged"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(bin + " score --threads 1 --model " + tmp.file("merged") + " --input " +
                        dir + "/tokens.json --json " + tmp.file("m.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(scalar_rel_err(read_json(tmp.file("m.json"))["loss"].get<double>(), want), kTol);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoraParity, ::testing::ValuesIn(lora_fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(LoraFiles, RefusesWhatItDoesNotImplement) {
  test::TempDir tmp;
  auto write = [&](const std::string& body) {
    FILE* fp = std::fopen(tmp.file("adapter_config.json").c_str(), "w");
    std::fputs(body.c_str(), fp);
    std::fclose(fp);
  };
  write(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"],
            "use_dora": true})");
  EXPECT_THROW(read_lora_config(tmp.path()), InputError);
  write(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"],
            "bias": "all"})");
  EXPECT_THROW(read_lora_config(tmp.path()), InputError);
  write(R"({"peft_type": "LORA", "r": 8, "target_modules": ["qkv"]})");
  EXPECT_THROW(read_lora_config(tmp.path()), InputError);
  write(R"({"peft_type": "PREFIX_TUNING", "r": 8, "target_modules": ["q_proj"]})");
  EXPECT_THROW(read_lora_config(tmp.path()), InputError);
  write(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear",
            "lora_dropout": 0.1})");
  const LoraConfig c = read_lora_config(tmp.path());  // dropout of a trained adapter: ignored
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_TRUE(c.targets(LoraTarget::down_proj));
  write("{not json");
  EXPECT_THROW(read_lora_config(tmp.path()), InputError);
}

}  // namespace
}  // namespace sbp
