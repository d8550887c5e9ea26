// Sliding windows outside Gemma: Qwen2 / Qwen3 (use_sliding_window, max_window_layers,
// layer_types), read as transformers 5.24 reads them, written back so that transformers reads
// the same model, and --layers overrides.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/config.h"

namespace sbp {
namespace {

using json = nlohmann::json;

// What transformers 5.24 writes for Qwen2Config(..., use_sliding_window=True, sliding_window=4,
// max_window_layers=1) (config.to_dict(), the fields that matter here).
json qwen2_window_config() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96,
    "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
    "max_position_embeddings": 32768, "max_window_layers": 1, "model_type": "qwen2",
    "num_attention_heads": 4, "num_hidden_layers": 3, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "sliding_window": 4, "tie_word_embeddings": false, "transformers_version": "5.24.0",
    "use_cache": true, "use_sliding_window": true, "vocab_size": 50})");
}

void expect_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    ModelConfig::from_json(j, "windir/config.json");
    FAIL() << "expected InputError for " << j.dump();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("windir/config.json"), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "wanted '" << p << "' in: " << msg;
  }
}

TEST(WindowConfig, Qwen2SlidesFromMaxWindowLayersOn) {
  json j = qwen2_window_config();
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.sliding_window, 4);
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(c.layer_window(0), 0);
  EXPECT_EQ(c.layer_window(2), 4);
  // Without layer_types (transformers <= 4.52, or a hand-written config): the same layers,
  // from max_window_layers (Qwen2Config.__post_init__: sliding iff i >= max_window_layers).
  j.erase("layer_types");
  EXPECT_EQ(ModelConfig::from_json(j, "c").layer_sliding, c.layer_sliding);
  j["max_window_layers"] = 0;
  EXPECT_EQ(ModelConfig::from_json(j, "c").layer_sliding, (std::vector<bool>{true, true, true}));
  j.erase("max_window_layers");  // transformers' default 28: no layer of 3 slides
  EXPECT_FALSE(ModelConfig::from_json(j, "c").has_sliding_layers());
  // layer_types win over max_window_layers, as in transformers.
  j = qwen2_window_config();
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(ModelConfig::from_json(j, "c").layer_sliding,
            (std::vector<bool>{true, false, true}));
  // Qwen3Config has the same fields and the same rule.
  j = qwen2_window_config();
  j["model_type"] = "qwen3";
  j["head_dim"] = 16;
  const ModelConfig q3 = ModelConfig::from_json(j, "c");
  EXPECT_EQ(q3.model_type, ModelType::qwen3);
  EXPECT_EQ(q3.layer_sliding, c.layer_sliding);
}

TEST(WindowConfig, Qwen2WithoutAWindowKeepsItsFieldsAsTheyWere) {
  // use_sliding_window false (every published Qwen2.5): no window, fields written back as read.
  json j = qwen2_window_config();
  j["use_sliding_window"] = false;
  j["sliding_window"] = 131072;
  j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  ModelConfig c = ModelConfig::from_json(j, "c");
  EXPECT_FALSE(c.has_sliding_layers());
  EXPECT_EQ(c.sliding_window, 0);
  json out = c.to_json();
  EXPECT_EQ(out.at("use_sliding_window"), false);
  EXPECT_EQ(out.at("sliding_window"), 131072);
  EXPECT_EQ(out.at("max_window_layers"), 1);
  c.set_num_layers(2);  // the written layer_types follow the depth
  EXPECT_EQ(c.to_json().at("layer_types"), json::array({"full_attention", "full_attention"}));
  // use_sliding_window with a null window: transformers' layer types are all full.
  j = qwen2_window_config();
  j["sliding_window"] = nullptr;
  j.erase("layer_types");
  c = ModelConfig::from_json(j, "c");
  EXPECT_FALSE(c.has_sliding_layers());
  EXPECT_TRUE(c.to_json().at("sliding_window").is_null());
}

TEST(WindowConfig, Qwen2WrittenBackReadsTheSame) {
  const ModelConfig c = ModelConfig::from_json(qwen2_window_config(), "config.json");
  const json j = c.to_json();
  EXPECT_EQ(j.at("use_sliding_window"), true);
  EXPECT_EQ(j.at("sliding_window"), 4);
  EXPECT_EQ(j.at("max_window_layers"), 1);
  EXPECT_EQ(j.at("layer_types"),
            json::array({"full_attention", "sliding_attention", "sliding_attention"}));
  const ModelConfig b = ModelConfig::from_json(j, "written");
  EXPECT_EQ(b.to_json(), j);
  EXPECT_EQ(b.layer_sliding, c.layer_sliding);
  EXPECT_EQ(b.rope_inv_freq(), c.rope_inv_freq());
}

TEST(WindowConfig, RejectsWhatTransformersWouldNotBuildAlike) {
  json j = qwen2_window_config();
  j["use_sliding_window"] = false;  // sliding layer types without a window: transformers fails
  expect_error(j, {"layer_types", "sliding_attention", "no window"});
  j = qwen2_window_config();
  j["sliding_window"] = 0;
  expect_error(j, {"sliding_window", "positive"});
  j = qwen2_window_config();
  j["layer_types"] = {"full_attention"};
  expect_error(j, {"layer_types", "1 entries"});
  j = qwen2_window_config();
  j["max_window_layers"] = "1";
  expect_error(j, {"max_window_layers", "integer"});
  j = qwen2_window_config();
  j["sliding_window"] = -3;
  expect_error(j, {"sliding_window", "positive"});
  // Llama and Gemma have no such field: refused rather than ignored.
  j = qwen2_window_config();
  j["model_type"] = "llama";
  j.erase("layer_types");
  expect_error(j, {"use_sliding_window", "llama"});
  // Mistral (every layer sliding) is not a supported model_type yet.
  j = qwen2_window_config();
  j["model_type"] = "mistral";
  expect_error(j, {"unsupported model_type 'mistral'"});
}

TEST(WindowConfig, LayerOverrideKeepsTheLayerTypes) {
  ModelConfig c = ModelConfig::from_json(qwen2_window_config(), "c");
  c.set_num_layers(5);  // new layers slide: they are past max_window_layers
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{false, true, true, true, true}));
  c.set_num_layers(1);
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{false}));
  EXPECT_NO_THROW(c.validate("c"));
  EXPECT_EQ(c.to_json().at("layer_types"), json::array({"full_attention"}));
  // Without max_window_layers, transformers' default 28.
  json j = qwen2_window_config();
  j.erase("max_window_layers");
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention"};
  ModelConfig d = ModelConfig::from_json(j, "d");
  d.set_num_layers(30);
  EXPECT_TRUE(d.layer_is_sliding(2));
  EXPECT_FALSE(d.layer_is_sliding(27));
  EXPECT_TRUE(d.layer_is_sliding(28));
  // A window on a model built in code for a family without windows is a mistake.
  ModelConfig l = preset_config("tiny-llama");
  l.sliding_window = 4;
  l.layer_sliding = {true, true};
  EXPECT_THROW(l.validate("code"), InputError);
}

}  // namespace
}  // namespace sbp
