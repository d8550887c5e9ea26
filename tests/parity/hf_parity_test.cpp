// Parity with Hugging Face `transformers` (the llm.c pattern): tiny random models written by
// save_pretrained, and what transformers computes for them in float32 (logits slice, per-token
// target log-probs, SFT loss, every parameter gradient), are committed under tests/fixtures/hf
// by tools/hf_parity/make_fixtures.py. These tests load each fixture through the normal loading
// path (load_config + load_weights, and the `streambp score` command) and compare, in every
// execution mode with several chunk sizes.
//
// Tolerances. Both sides compute in fp32 from identical fp32 weights (the bf16 fixture's
// weights are bf16 values, exactly representable in fp32 on both sides); what differs is only
// the summation order of the dot products, softmaxes and reductions (OpenBLAS sgemm + our
// tiled online-softmax attention vs. PyTorch's kernels + eager softmax). With reductions of at
// most a few hundred terms and two layers, that moves results by a few fp32 ulps relative to
// the largest value of a tensor. Measured with the error measure max|a-b|/max|b|
// (test::rel_err), worst over all fixtures and modes, in the Release and the sanitizer build:
// logits 8.4e-7, log-probs 3.0e-7, loss 1.0e-7, gradients 2.5e-6 (the [parity] lines this test
// prints). We allow 1e-5 (kTol), 4x the largest, which is still far below what a modelling
// mistake produces: checked by hand, RoPE on interleaved pairs instead of rotate-half moves the
// logits by 0.2 .. 1.1 and some gradient by > 1 in every fixture, and skipping q-norm moves the
// qwen3 logits by 0.2 .. 0.5. (The loss alone is a weak check — it stays near ln V for random
// weights and moved by only 6e-4 .. 2e-2 — which is why logits, every log-prob and every
// gradient are compared.)
//
// The other direction (HfRoundtrip): a checkpoint that streambp wrote after a few AdamW steps
// loads in transformers (from_pretrained) and gives the logits streambp computes. The
// checkpoints and transformers' logits are committed under tests/fixtures/hf/roundtrip by
// tools/hf_parity/check_roundtrip.py; the test checks the logits on exactly those files, and
// that the recipe still writes the same checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint_io.h"
#include "model/safetensors.h"
#include "objective/sft.h"
#include "optim/adamw.h"
#include "parity/hf_fixture.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// fp32 vs fp32 with another summation order (see the header comment).
constexpr double kTol = 1e-5;

using namespace parity;  // NOLINT: the fixtures' helpers

class HfParity : public ::testing::TestWithParam<std::string> {};

// The fixtures are what the script says they are (guards against a stale or partial fixture).
TEST_P(HfParity, FixtureIsComplete) {
  Fixture f(GetParam());
  EXPECT_EQ(f.expected["fixture"], GetParam());
  EXPECT_EQ(f.expected["model_type"], model_type_name(f.cfg.model_type));
  EXPECT_EQ(static_cast<int64_t>(f.expected["num_loss_tokens"].get<double>()),
            static_cast<int64_t>(f.batch.loss_weight_sum()));
  EXPECT_EQ(f.expected["logprobs"].size(), f.batch.seq_lens.size());
  const bool sharded = fs::exists(f.dir + "/model/model.safetensors.index.json");
  EXPECT_EQ(sharded, f.expected["sharded"].get<bool>());
  // Every parameter has a reference gradient and every reference gradient a parameter.
  const auto grads = read_grads(f.dir + "/expected_grads.safetensors");
  std::set<std::string> ours;
  for (const ParamSpec& s : parameter_specs(f.cfg)) {
    ours.insert(s.name);
    ASSERT_TRUE(grads.count(s.name)) << s.name;
    EXPECT_EQ(static_cast<int64_t>(grads.at(s.name).size()), s.shape.numel()) << s.name;
  }
  for (const auto& [name, g] : grads) EXPECT_TRUE(ours.count(name)) << name;
}

TEST_P(HfParity, LogitsMatch) {
  Fixture f(GetParam());
  const json& lj = f.expected["logits"];
  const std::vector<int64_t> cols = lj["vocab_ids"].get<std::vector<int64_t>>();
  const std::vector<int64_t> off = segment_offsets(f.batch);
  std::vector<int64_t> rows;
  std::vector<float> want;
  for (const json& r : lj["rows"]) {
    rows.push_back(off[r["sequence"].get<size_t>()] + r["position"].get<int64_t>());
    for (const json& v : r["values"]) want.push_back(v.get<float>());
  }
  ASSERT_FALSE(rows.empty());
  Backend& be = f.be;
  const int64_t T = f.batch.size(), V = f.cfg.vocab_size;
  double worst = 0.0;
  for (const ExecConfig& e :
       {mode("base"), mode("stream", 1), mode("stream", 7), mode("stream", 16)}) {
    const std::vector<float> logits =
        Engine(f.cfg, f.weights, be, f.pool, e).logits_at(f.batch, rows);
    std::vector<float> got;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c : cols)
        got.push_back(logits[i * static_cast<size_t>(V) + static_cast<size_t>(c)]);
    const double err = rel_err(got, want);
    worst = std::max(worst, err);
    EXPECT_LT(err, kTol) << GetParam() << " " << describe(e) << " T=" << T;
  }
  std::printf("[parity] %-20s logits max rel err %.2e\n", GetParam().c_str(), worst);
}

// Engine::score: the forward-only path `streambp score` uses without --grads.
TEST_P(HfParity, ScoreLogprobsMatch) {
  Fixture f(GetParam());
  const std::vector<float> want = flatten_logprobs(f.expected["logprobs"]);
  Backend& be = f.be;
  for (const ExecConfig& e : {mode("stream", 1, 1), mode("stream", 7, 5), mode("base")}) {
    Engine engine(f.cfg, f.weights, be, f.pool, e);
    const std::vector<float> got = per_sequence_logp(f.batch, engine.score(f.batch).logp);
    EXPECT_LT(rel_err(got, want), kTol) << GetParam() << " " << describe(e);
  }
}

// One SFT step in every mode: loss, the log-probs the head computed, every gradient.
TEST_P(HfParity, LossLogprobsAndGradientsMatchInEveryMode) {
  Fixture f(GetParam());
  const auto want_grads = read_grads(f.dir + "/expected_grads.safetensors");
  const std::vector<float> want_logp = flatten_logprobs(f.expected["logprobs"]);
  const double want_loss = f.expected["loss"].get<double>();
  Backend& be = f.be;
  ParameterSet g(f.cfg, f.pool, Category::grads, DType::F32, true);
  double worst_loss = 0.0, worst_logp = 0.0, worst_grad = 0.0;
  std::string worst_name;
  for (const ExecConfig& e : modes_for(f.batch.size())) {
    for (size_t i = 0; i < g.size(); ++i) be.fill(g.tensor(i), 0.0f);
    Engine engine(f.cfg, f.weights, be, f.pool, e);
    RecordingSft obj(f.batch, f.batch.loss_weight_sum());
    engine.forward_backward(f.batch, obj, g);
    const double loss_err = scalar_rel_err(obj.loss(), want_loss);
    const double logp_err = rel_err(per_sequence_logp(f.batch, obj.logp()), want_logp);
    worst_loss = std::max(worst_loss, loss_err);
    worst_logp = std::max(worst_logp, logp_err);
    EXPECT_LT(loss_err, kTol) << GetParam() << " " << describe(e);
    EXPECT_LT(logp_err, kTol) << GetParam() << " " << describe(e);
    for (size_t i = 0; i < g.size(); ++i) {
      const std::vector<float>& want = want_grads.at(g.name(i));
      ASSERT_EQ(static_cast<int64_t>(want.size()), g.tensor(i).numel()) << g.name(i);
      const double err =
          test::rel_err(download_f32(g.tensor(i)).data(), want.data(), g.tensor(i).numel());
      if (err > worst_grad) {
        worst_grad = err;
        worst_name = g.name(i);
      }
      EXPECT_LT(err, kTol) << GetParam() << " " << describe(e) << " " << g.name(i);
    }
  }
  std::printf("[parity] %-20s loss %.2e  logp %.2e  grads %.2e (%s)\n", GetParam().c_str(),
              worst_loss, worst_logp, worst_grad, worst_name.c_str());
}

// The same comparison through the command a user runs: `streambp score`.
TEST_P(HfParity, ScoreCommandMatches) {
  const std::string dir = fixture_dir(GetParam());
  const json expected = read_json(dir + "/expected.json");
  test::TempDir tmp;
  // Two threads for one fixture: the multi-threaded kernels against transformers too (more
  // would only add OpenMP barrier time on a loaded 2-core machine).
  const std::string threads = GetParam() == fixture_names()[0] ? "2" : "1";
  const std::string cmd = test::streambp_binary() + " score --model " + dir + "/model --input " +
                          dir + "/tokens.json --mode stream --layer-chunk 7 --head-chunk 5" +
                          " --threads " + threads + " --grads " + tmp.file("g.safetensors") +
                          " --json " + tmp.file("s.json");
  const test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("score: loss"), std::string::npos) << r.output;
  const json s = read_json(tmp.file("s.json"));
  EXPECT_LT(scalar_rel_err(s["loss"].get<double>(), expected["loss"].get<double>()), kTol);
  EXPECT_EQ(s["num_loss_tokens"], expected["num_loss_tokens"]);
  EXPECT_LT(rel_err(flatten_logprobs(s["logprobs"]), flatten_logprobs(expected["logprobs"])), kTol);
  ASSERT_EQ(s["logprobs"].size(), expected["logprobs"].size());
  for (size_t i = 0; i < s["logprobs"].size(); ++i)
    EXPECT_EQ(s["logprobs"][i].size(), expected["logprobs"][i].size()) << "sequence " << i;

  const auto got = read_grads(tmp.file("g.safetensors"));
  const auto want = read_grads(dir + "/expected_grads.safetensors");
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_LT(rel_err(got.at(name), w), kTol) << GetParam() << " " << name;
  }

  // Without --grads the forward-only path gives the same loss and log-probs.
  const test::CommandResult r2 =
      test::run_command(test::streambp_binary() + " score --model " + dir + "/model --input " +
                        dir + "/tokens.json --mode base --threads 1 --json " + tmp.file("s2.json"));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const json s2 = read_json(tmp.file("s2.json"));
  EXPECT_LT(scalar_rel_err(s2["loss"].get<double>(), expected["loss"].get<double>()), kTol);
  EXPECT_LT(rel_err(flatten_logprobs(s2["logprobs"]), flatten_logprobs(expected["logprobs"])),
            kTol);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity, ::testing::ValuesIn(fixture_names()),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------- score: bad input

struct ScoreRun {
  test::TempDir tmp;
  test::CommandResult run(const std::string& tokens_json, const std::string& extra = "") {
    test::write_text(tmp.file("tokens.json"), tokens_json);
    return test::run_command(test::streambp_binary() + " score --model " +
                             fixture_dir("qwen2_bias_tied") + "/model --input " +
                             tmp.file("tokens.json") + " --json " + tmp.file("out.json") +
                             " --grads " + tmp.file("g.safetensors") + " --threads 1 " + extra);
  }
  bool wrote_nothing() const {
    return !fs::exists(tmp.file("out.json")) && !fs::exists(tmp.file("g.safetensors"));
  }
};

TEST(ScoreCommand, RejectsBadInputWithFieldAndPosition) {
  // vocab of qwen2_bias_tied is 112
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "invalid JSON"},
      {"[1, 2]", "expected an object"},
      {R"({"seqs": [[1, 2]]})", "unknown field 'seqs'"},
      {R"({"loss_mask": [[1, 1]]})", "missing field 'sequences'"},
      {R"({"sequences": 3})", "'sequences' must be an array"},
      {R"({"sequences": []})", "'sequences' is empty"},
      {R"({"sequences": [[1, 2], []]})", "sequences[1]: is empty"},
      {R"({"sequences": [[1, 2], [3, "a"]]})", "sequences[1][1]: token id must be an integer"},
      {R"({"sequences": [[1, 2.5]]})", "sequences[0][1]: token id must be an integer"},
      {R"({"sequences": [[1, 2], [3, 4, 112]]})", "sequences[1][2]: token id 112 is outside"},
      {R"({"sequences": [[-1, 2]]})", "sequences[0][0]: token id -1 is outside"},
      {R"({"sequences": [[1, 2]], "loss_mask": [[1, 1], [1]]})", "'loss_mask' has 2 entries"},
      {R"({"sequences": [[1, 2], [3, 4]], "loss_mask": [[1, 1], [1]]})",
       "loss_mask[1]: has 1 entries but sequences[1] has 2 tokens"},
      {R"({"sequences": [[1, 2, 3]], "loss_mask": [[0, 1, 2]]})",
       "loss_mask[0][2]: must be 0 or 1"},
      {R"({"sequences": [[1, 2]], "loss_mask": 1})", "'loss_mask' must be an array"},
  };
  for (const auto& [input, message] : cases) {
    ScoreRun s;
    const test::CommandResult r = s.run(input);
    EXPECT_EQ(r.exit_code, 1) << input << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << input << "\n" << r.output;
    EXPECT_NE(r.output.find("tokens.json"), std::string::npos) << r.output;  // names the file
    EXPECT_TRUE(s.wrote_nothing()) << input;
  }
}

TEST(ScoreCommand, RejectsMissingFilesModesAndWeightlessDirectories) {
  ScoreRun s;
  test::CommandResult r = test::run_command(test::streambp_binary() + " score --model " +
                                            fixture_dir("qwen2_bias_tied") + "/model --input " +
                                            s.tmp.file("nope.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nope.json: cannot read"), std::string::npos) << r.output;

  r = s.run(R"({"sequences": [[1, 2, 3]]})", "--mode sideways");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown mode 'sideways'"), std::string::npos) << r.output;

  // A directory with config.json but no weights must not be scored with random weights.
  fs::create_directories(s.tmp.file("empty_model"));
  fs::copy_file(fixture_dir("qwen2_bias_tied") + "/model/config.json",
                s.tmp.file("empty_model/config.json"));
  r = test::run_command(test::streambp_binary() + " score --model " + s.tmp.file("empty_model") +
                        " --input " + s.tmp.file("tokens.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no model.safetensors"), std::string::npos) << r.output;
}

TEST(ScoreCommand, DefaultMaskCountsEveryTargetAndAllMaskedGivesNullLoss) {
  ScoreRun s;
  test::CommandResult r = s.run(R"({"sequences": [[5, 6, 7], [8], [9, 10]]})");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = read_json(s.tmp.file("out.json"));
  EXPECT_EQ(j["num_loss_tokens"], 3);  // 2 + 0 + 1 targets
  ASSERT_EQ(j["logprobs"].size(), 3u);
  EXPECT_EQ(j["logprobs"][1].size(), 0u);  // a one-token sequence predicts nothing
  EXPECT_GT(j["loss"].get<double>(), 0.0);

  r = s.run(R"({"sequences": [[5, 6, 7]], "loss_mask": [[1, 0, false]]})");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = read_json(s.tmp.file("out.json"));
  EXPECT_EQ(j["num_loss_tokens"], 0);
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_NE(r.output.find("no loss tokens"), std::string::npos) << r.output;
}

// ---------------------------------------------------------------- the other direction

// The recipe: start from a fixture's weights, take kSteps AdamW steps (lr 1e-2, weight decay
// 0.01) of the SFT loss on its tokens.json in stream mode, save with save_model_dir — in BF16
// and sharded (qwen3), in BF16 (llama, whose llama3 rope scaling streambp writes in the 4.x
// `rope_scaling` spelling), and in F32 with tied embeddings (qwen2), so each writer path meets
// transformers' loader. check_roundtrip.py runs RecipeRecreatesTheCommittedCheckpoint with
// STREAMBP_HF_ROUNDTRIP_OUT set to get the checkpoints, loads them with transformers, and
// commits both the checkpoints (tests/fixtures/hf/roundtrip/<fixture>/model) and transformers'
// logits (.../transformers_logits.json).
struct RoundtripCase {
  const char* fixture;
  DType dtype;
  int64_t max_shard_bytes;
};
const RoundtripCase kRoundtrips[] = {{"qwen3_gqa_qknorm", DType::BF16, 30000},
                                     {"llama_rope_llama3", DType::BF16, 0},
                                     {"qwen2_bias_tied", DType::F32, 0},
                                     // Gemma 3: config.json written in transformers 5's spelling
                                     // (layer_types, rope_parameters per layer type, soft-cap)
                                     {"gemma3_sliding_softcap", DType::BF16, 0},
                                     // Qwen2 with use_sliding_window: config.json carries the
                                     // window and layer_types (layer 0 full, 1-2 sliding)
                                     {"qwen2_sliding_window", DType::F32, 0},
                                     // Mistral: config.json with sliding_window (every layer),
                                     // no layer_types / use_sliding_window / attention_bias
                                     {"mistral_sliding_window", DType::BF16, 0}};
constexpr int kSteps = 3;

std::string roundtrip_dir(const RoundtripCase& c) {
  return test::source_dir() + "/tests/fixtures/hf/roundtrip/" + c.fixture;
}

void train_and_save(Fixture& f, const RoundtripCase& c, const std::string& out) {
  Backend& be = f.be;
  ParameterSet g(f.cfg, f.pool, Category::grads, DType::F32, true);
  AdamWConfig ac;
  ac.weight_decay = 0.01f;
  // eps well above rounding noise: with AdamW's default 1e-8, a gradient entry that is ~0 (a
  // component of layer 2's k_proj.bias in qwen2_sliding_window) takes a step of up to lr in the
  // direction of its rounding noise, so the sanitizer build (no FMA contraction) moved that
  // weight by 1.1e-3 (4.9e-3 of the tensor's largest value). With 1e-4 such an entry moves by
  // lr * g / eps, continuous in g; real gradients (>= 1e-3 here) still take AdamW steps.
  ac.eps = 1e-4f;
  AdamW opt(f.cfg, f.pool, ac);
  Engine engine(f.cfg, f.weights, be, f.pool, mode("stream", 16, 32));
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < g.size(); ++i) be.fill(g.tensor(i), 0.0f);
    SftObjective obj(f.batch, f.batch.loss_weight_sum());
    engine.forward_backward(f.batch, obj, g);
    opt.step(f.weights, g, be, 1e-2f);
  }
  save_model_dir(out, f.cfg, f.weights, c.dtype, c.max_shard_bytes);
}

// Every tensor of a model directory (single file or shards) as F32, by name.
std::map<std::string, std::vector<float>> read_model_tensors(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    for (auto& [name, v] : read_grads(e.path().string())) out[name] = std::move(v);
  }
  return out;
}

class HfRoundtrip : public ::testing::TestWithParam<size_t> {};

// The checkpoint streambp wrote, exactly as transformers read it: load it the normal way and
// compare logits with transformers' (all vocabulary entries of a few rows per sequence).
TEST_P(HfRoundtrip, CommittedCheckpointGivesTransformersLogits) {
  const RoundtripCase& c = kRoundtrips[GetParam()];
  Fixture f(c.fixture);  // for the tokens (and the untrained weights)
  const std::string dir = roundtrip_dir(c);
  const ModelConfig cfg = load_config(dir + "/model");
  ParameterSet w(cfg, f.pool, Category::weights, DType::F32, false);
  load_weights(dir + "/model", cfg, w);
  const json rec = read_json(dir + "/transformers_logits.json");
  EXPECT_EQ(rec["steps"].get<int>(), kSteps);
  const std::vector<int64_t> off = segment_offsets(f.batch);
  std::vector<int64_t> rows;
  std::vector<float> want;
  for (const json& r : rec["rows"]) {
    rows.push_back(off[r["sequence"].get<size_t>()] + r["position"].get<int64_t>());
    for (const json& v : r["values"]) want.push_back(v.get<float>());
  }
  ASSERT_EQ(static_cast<int64_t>(want.size()), static_cast<int64_t>(rows.size()) * cfg.vocab_size);
  Backend& be = f.be;
  const std::vector<float> got =
      Engine(cfg, w, be, f.pool, mode("stream", 7)).logits_at(f.batch, rows);
  // Training really moved the model: the untrained fixture's logits are far from these.
  const std::vector<float> before =
      Engine(f.cfg, f.weights, be, f.pool, mode("base")).logits_at(f.batch, rows);
  const double err = rel_err(got, want);
  std::printf("[parity] roundtrip %-20s logits max rel err %.2e (untrained model: %.2e)\n",
              c.fixture, err, rel_err(before, want));
  EXPECT_GT(rel_err(before, want), 100 * kTol) << c.fixture;
  // kTol: both sides read the same file, so the weights are the same floats (see the header).
  EXPECT_LT(err, kTol) << c.fixture;
}

// The committed checkpoint is what the recipe produces with this build: the same files, the same
// config.json text, and the same tensors up to the last bits. Not bit for bit: another build
// (e.g. -O1 without -march=native under the sanitizers, so no FMA contraction) or thread count
// changes summation orders, and AdamW's first steps, ~lr*g/(|g|+eps), turn a relative change δ
// of a gradient entry near 0 into up to lr*δ|g|/eps; after the BF16 save, a value that lands
// near a rounding boundary may flip to the neighbouring bf16 number (a change of at most 2^-7
// relative to the tensor's largest value). Measured between the Release and the sanitizer
// build: F32 2.6e-5, BF16 2.9e-3. Bounds: 1e-3 (F32) and 1e-3 + 2^-7 (BF16); a wrong
// optimizer step or a writer that mixes up tensors moves weights by 0.1 .. 1.
TEST_P(HfRoundtrip, RecipeRecreatesTheCommittedCheckpoint) {
  const RoundtripCase& c = kRoundtrips[GetParam()];
  const char* collect = std::getenv("STREAMBP_HF_ROUNDTRIP_OUT");  // set by check_roundtrip.py
  test::TempDir tmp;
  const std::string out = (collect ? std::string(collect) : tmp.path()) + "/" + c.fixture;
  {
    Fixture f(c.fixture);
    train_and_save(f, c, out);
  }
  if (collect) {
    std::printf("wrote %s\n", out.c_str());
    return;  // the committed files are about to be replaced; nothing to compare
  }
  const std::string committed = roundtrip_dir(c) + "/model";
  std::set<std::string> want_files, got_files;
  for (const auto& e : fs::directory_iterator(committed)) want_files.insert(e.path().filename());
  for (const auto& e : fs::directory_iterator(out)) got_files.insert(e.path().filename());
  EXPECT_EQ(got_files, want_files);
  EXPECT_EQ(read_json(out + "/config.json"), read_json(committed + "/config.json"));
  const auto got = read_model_tensors(out);
  const auto want = read_model_tensors(committed);
  ASSERT_EQ(got.size(), want.size());
  const double bound = c.dtype == DType::BF16 ? 1e-3 + 1.0 / 128 : 1e-3;
  double worst = 0.0;
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const double err = rel_err(got.at(name), w);
    worst = std::max(worst, err);
    EXPECT_LE(err, bound) << c.fixture << " " << name;
  }
  std::printf("[parity] roundtrip %-20s re-created weights max rel err %.2e\n", c.fixture, worst);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, HfRoundtrip,
                         ::testing::Range<size_t>(0, std::size(kRoundtrips)),
                         [](const auto& info) {
                           return std::string(kRoundtrips[info.param].fixture);
                         });

// Context extension (issue 52): a checkpoint `streambp train` wrote with context.rope_scaling
// yarn x4 (over 128 original positions) and context.max_position_embeddings 512, committed with
// the log-probs transformers computes from it (tools/hf_parity/check_context_extension.py), at
// 170 .. 450 positions. streambp reads the rope from the checkpoint's config.json and gives the
// same log-probs: the trainer wrote what it trained with, in the spelling transformers reads.
TEST(HfContextExtension, TrainedCheckpointScoresAsInTransformers) {
  const std::string dir = test::source_dir() + "/tests/fixtures/hf/context_extension";
  const json want = read_json(dir + "/transformers_logprobs.json");
  EXPECT_EQ(want["rope_parameters"]["rope_type"], "yarn");
  Ledger ledger;
  const std::unique_ptr<Backend> backend = test::backend();
  Pool pool(ledger, *backend);
  const ModelConfig cfg = load_config(dir + "/model");
  ASSERT_EQ(cfg.rope_scaling.type, RopeScalingType::yarn);
  EXPECT_EQ(cfg.max_position_embeddings, 512);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  load_weights(dir + "/model", cfg, w);
  const Batch batch = read_batch(dir + "/tokens.json");
  const std::vector<float> expected = flatten_logprobs(want["logprobs"]);
  set_cpu_threads(1);
  for (const ExecConfig& e : {mode("base"), mode("stream", 64, 32), mode("stream", 7, 5)}) {
    Engine engine(cfg, w, *backend, pool, e);
    const std::vector<float> got = per_sequence_logp(batch, engine.score(batch).logp);
    const double err = rel_err(got, expected);
    std::printf("[parity] context extension %s logp max rel err %.2e\n", describe(e).c_str(), err);
    EXPECT_LT(err, kTol) << describe(e);
  }
}

}  // namespace
}  // namespace sbp
