// Rope scaling (issue 52): the frequencies and attention factor of yarn and dynamic rope against
// the ones transformers rotated with in the parity fixtures (expected.json's "rope", written by
// tools/hf_parity/make_fixtures.py), the config fields' validation, the round trip through
// to_json, and how a table is built for a packed batch and for generation (rope_rows).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/prepared_batch.h"
#include "model/config.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using json = nlohmann::json;

std::string fixture(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/hf/" + name;
}

// transformers' frequencies, bit for bit: the same float32 and float64 steps in the same order
// (model/rope.cpp). The attention factor is a Python float there, applied as float32.
TEST(RopeScaling, FrequenciesEqualTransformers) {
  for (const char* name :
       {"llama_rope_yarn", "qwen3_rope_yarn_mscale", "qwen2_rope_yarn_attention_factor",
        "gemma3_rope_yarn", "llama_rope_dynamic"}) {
    SCOPED_TRACE(name);
    const ModelConfig cfg = ModelConfig::from_file(fixture(name) + "/model/config.json");
    const json want = json::parse(test::read_text(fixture(name) + "/expected.json"))["rope"];
    const RopeFrequencies got = cfg.rope_frequencies(want["seq_len"].get<int64_t>());
    const std::vector<float> inv = want["inv_freq"].get<std::vector<float>>();
    ASSERT_EQ(got.inv_freq.size(), inv.size());
    for (size_t i = 0; i < inv.size(); ++i)
      EXPECT_EQ(got.inv_freq[i], inv[i]) << "inv_freq[" << i << "]";
    EXPECT_EQ(got.attention_factor, static_cast<float>(want["attention_scaling"].get<double>()));
  }
}

json llama() {
  return {{"model_type", "llama"},         {"hidden_size", 64},        {"intermediate_size", 96},
          {"num_hidden_layers", 2},        {"num_attention_heads", 4}, {"vocab_size", 50},
          {"max_position_embeddings", 128}};
}

void expect_error(const json& rope, std::initializer_list<std::string> parts) {
  json j = llama();
  j["rope_scaling"] = rope;
  try {
    ModelConfig::from_json(j, "dir/config.json");
    FAIL() << "expected InputError for " << rope.dump();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("dir/config.json"), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "wanted '" << p << "' in: " << msg;
  }
}

TEST(RopeScaling, BadFieldsAreNamed) {
  const json yarn = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  const auto with = [&](const char* k, json v) {
    json r = yarn;
    r[k] = std::move(v);
    return r;
  };
  expect_error({{"rope_type", "yarn"}}, {"yarn", "'factor'"});
  expect_error({{"rope_type", "dynamic"}}, {"dynamic", "'factor'"});
  expect_error(with("factor", 0.0), {"'factor'", "positive"});
  expect_error(with("factor", -1.0), {"'factor'"});
  expect_error(with("factor", "4"), {"'factor'", "number"});
  expect_error(with("original_max_position_embeddings", 0), {"original_max_position_embeddings"});
  expect_error(with("original_max_position_embeddings", 1.5),
               {"original_max_position_embeddings", "integer"});
  expect_error(with("beta_fast", -1.0), {"'beta_fast'"});
  expect_error(with("beta_slow", -1.0), {"'beta_slow'"});
  expect_error(with("beta_slow", 64.0), {"'beta_fast'", "'beta_slow'"});
  expect_error(with("attention_factor", 0.0), {"'attention_factor'"});
  expect_error(with("attention_factor", "1"), {"'attention_factor'", "number"});
  expect_error(with("mscale", "x"), {"'mscale'"});
  expect_error(with("mscale_all_dim", "x"), {"'mscale_all_dim'"});
  expect_error(with("truncate", 1), {"'truncate'", "true or false"});
  expect_error({{"rope_type", "dynamic"}, {"factor", 2.0}, {"beta_fast", 4.0}},
               {"'beta_fast'", "yarn field", "dynamic"});
  expect_error({{"rope_type", "longrope"}, {"factor", 2.0}}, {"longrope", "not supported"});
}

TEST(RopeScaling, RoundTripsThroughToJson) {
  json j = llama();
  j["rope_scaling"] = {{"rope_type", "yarn"},     {"factor", 4.0},
                       {"beta_fast", 16.0},       {"mscale", 0.7},
                       {"mscale_all_dim", 0.7},   {"truncate", false},
                       {"attention_factor", 1.1}, {"original_max_position_embeddings", 32}};
  const ModelConfig c = ModelConfig::from_json(j, "c");
  const json out = c.to_json();
  EXPECT_EQ(out["rope_scaling"], j["rope_scaling"]) << out["rope_scaling"].dump();
  const ModelConfig back = ModelConfig::from_json(out, "back");
  EXPECT_EQ(back.rope_frequencies(100), c.rope_frequencies(100));
  // Unset fields stay unset (transformers' defaults apply on both sides).
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  const json plain = ModelConfig::from_json(j, "c").to_json()["rope_scaling"];
  EXPECT_EQ(
      plain,
      json({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 128}}))
      << "original_max_position_embeddings defaults to max_position_embeddings";
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(ModelConfig::from_json(j, "c").to_json()["rope_scaling"], j["rope_scaling"]);
}

TEST(RopeScaling, TopLevelOriginalPositionsWinAsInTransformers) {
  json j = llama();
  j["original_max_position_embeddings"] = 16;
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  EXPECT_EQ(ModelConfig::from_json(j, "c").rope_scaling.original_max_position_embeddings, 16);
}

TEST(RopeScaling, DynamicIsTheDefaultRopeWithinMaxPositions) {
  json j = llama();
  j["max_position_embeddings"] = 64;
  const ModelConfig plain = ModelConfig::from_json(j, "c");
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 3.0}};
  const ModelConfig dyn = ModelConfig::from_json(j, "c");
  for (int64_t L : {1, 17, 64}) EXPECT_EQ(dyn.rope_frequencies(L), plain.rope_frequencies(L));
  // Beyond, every frequency but the first (theta^0) is lower, and more so the longer.
  const RopeFrequencies a = dyn.rope_frequencies(65), b = dyn.rope_frequencies(200);
  const RopeFrequencies d = plain.rope_frequencies(200);
  EXPECT_EQ(a.inv_freq[0], 1.0f);
  for (size_t i = 1; i < a.inv_freq.size(); ++i) {
    EXPECT_LT(a.inv_freq[i], d.inv_freq[i]) << i;
    EXPECT_LT(b.inv_freq[i], a.inv_freq[i]) << i;
  }
}

TEST(RopeScaling, RowsOfABatchAndOfGeneration) {
  json j = llama();
  j["max_position_embeddings"] = 32;
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  const ModelConfig dyn = ModelConfig::from_json(j, "c");
  // A batch: one call, the longest segment's length.
  EXPECT_EQ(rope_rows(dyn, 50, 0), std::vector<RopeRows>({{0, 50, dyn.rope_frequencies(50)}}));
  // Generation from a 10-token prompt: the default rope up to 32 positions, then each new
  // position its own length (transformers' generate recomputes at every step beyond).
  const std::vector<RopeRows> gen = rope_rows(dyn, 40, 10);
  ASSERT_EQ(gen.size(), 1u + 8u);
  EXPECT_EQ(gen[0], (RopeRows{0, 32, dyn.rope_frequencies(10)}));
  for (int64_t p = 32; p < 40; ++p)
    EXPECT_EQ(gen[static_cast<size_t>(p - 31)], (RopeRows{p, 1, dyn.rope_frequencies(p + 1)}));
  // A prompt beyond max_position_embeddings: its rows share its own length.
  EXPECT_EQ(rope_rows(dyn, 45, 40).front(), (RopeRows{0, 40, dyn.rope_frequencies(40)}));
  // Every other scaling: one call whatever the prefill.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  const ModelConfig yarn = ModelConfig::from_json(j, "c");
  EXPECT_EQ(rope_rows(yarn, 40, 10).size(), 1u);
}

}  // namespace
}  // namespace sbp
