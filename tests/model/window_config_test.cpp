// Sliding windows outside Gemma: Qwen2 / Qwen3 (use_sliding_window, max_window_layers,
// layer_types) and Mistral (sliding_window on every layer), read as transformers 5.24 reads
// them, written back so that transformers reads the same model, and --layers overrides.
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
  // Qwen2's switch on a Mistral config: transformers' MistralConfig has no such field.
  j = qwen2_window_config();
  j["model_type"] = "mistral";
  j.erase("layer_types");
  expect_error(j, {"use_sliding_window", "not a Mistral field"});
}

// What transformers 5.24 writes for MistralConfig(..., sliding_window=4) (config.to_dict(), the
// fields that matter here): no layer_types, no use_sliding_window.
json mistral_config() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "dtype": "bfloat16", "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 4, "num_hidden_layers": 3,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "sliding_window": 4, "tie_word_embeddings": false, "transformers_version": "5.24.0",
    "use_cache": true, "vocab_size": 50})");
}

TEST(WindowConfig, MistralSlidesEveryLayer) {
  const ModelConfig c = ModelConfig::from_json(mistral_config(), "config.json");
  EXPECT_EQ(c.model_type, ModelType::mistral);
  EXPECT_EQ(c.sliding_window, 4);
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{true, true, true}));
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(c.layer_window(l), 4) << l;
  // Llama's layers: no biases, no q/k norms, SwiGLU, plain norms, rope theta from
  // rope_parameters.
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_FALSE(c.o_bias());
  EXPECT_FALSE(c.qk_norm());
  EXPECT_FALSE(c.gemma());
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(WindowConfig, MistralNullWindowIsFullAttention) {
  // Mistral 7B v0.2 / v0.3: sliding_window null, MistralModel builds the plain causal mask.
  json j = mistral_config();
  j["sliding_window"] = nullptr;
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_FALSE(c.has_sliding_layers());
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.layer_window(0), 0);
  // Written back as null, not dropped: a missing key would read as MistralConfig's 4096.
  const json out = c.to_json();
  ASSERT_TRUE(out.contains("sliding_window"));
  EXPECT_TRUE(out.at("sliding_window").is_null());
  EXPECT_FALSE(ModelConfig::from_json(out, "written").has_sliding_layers());
}

TEST(WindowConfig, MistralMissingKeysTakeMistralConfigDefaults) {
  // transformers 5.24 MistralConfig: sliding_window 4096, num_key_value_heads 8,
  // max_position_embeddings 4096 * 32, head_dim hidden / heads, rope_theta 1e4.
  json j = {{"model_type", "mistral"},    {"hidden_size", 256},        {"intermediate_size", 96},
            {"num_hidden_layers", 2},     {"num_attention_heads", 16}, {"vocab_size", 50}};
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{true, true}));
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e4);
  EXPECT_FALSE(c.tie_word_embeddings);
  // head_dim: null is the same default; a given head_dim wins.
  j["head_dim"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j, "c").head_dim, 16);
  j["head_dim"] = 32;
  EXPECT_EQ(ModelConfig::from_json(j, "c").head_dim, 32);
  // The default window is written out explicitly.
  EXPECT_EQ(c.to_json().at("sliding_window"), 4096);
  // tie_word_embeddings is honoured when given.
  j["tie_word_embeddings"] = true;
  EXPECT_TRUE(ModelConfig::from_json(j, "c").tie_word_embeddings);
}

TEST(WindowConfig, MistralWrittenBackReadsTheSame) {
  const ModelConfig c = ModelConfig::from_json(mistral_config(), "config.json");
  const json j = c.to_json();
  EXPECT_EQ(j.at("model_type"), "mistral");
  EXPECT_EQ(j.at("architectures"), json::array({"MistralForCausalLM"}));
  EXPECT_EQ(j.at("sliding_window"), 4);
  // Not MistralConfig fields: transformers would keep them as stray attributes (layer_types
  // with a warning).
  EXPECT_FALSE(j.contains("use_sliding_window"));
  EXPECT_FALSE(j.contains("layer_types"));
  EXPECT_FALSE(j.contains("attention_bias"));
  const ModelConfig b = ModelConfig::from_json(j, "written");
  EXPECT_EQ(b.to_json(), j);
  EXPECT_EQ(b.layer_sliding, c.layer_sliding);
  EXPECT_EQ(b.rope_inv_freq(), c.rope_inv_freq());
  // A config built in code (a preset) writes a config that reads back as the same model.
  for (const char* name : {"tiny-mistral", "mistral-7b-v0.1", "mistral-7b-v0.3"}) {
    const ModelConfig p = preset_config(name);
    const ModelConfig q = ModelConfig::from_json(p.to_json(), name);
    EXPECT_EQ(q.model_type, ModelType::mistral) << name;
    EXPECT_EQ(q.sliding_window, p.sliding_window) << name;
    EXPECT_EQ(q.layer_sliding, p.layer_sliding) << name;
    EXPECT_EQ(q.num_parameters(), p.num_parameters()) << name;
  }
}

TEST(WindowConfig, MistralRejectsBadWindowsNamingTheField) {
  json j = mistral_config();
  j["sliding_window"] = 0;
  expect_error(j, {"'sliding_window'", "positive integer or null", "got 0"});
  j["sliding_window"] = -8;
  expect_error(j, {"'sliding_window'", "positive integer or null", "got -8"});
  j["sliding_window"] = "4096";
  expect_error(j, {"'sliding_window'", "must be an integer"});
  j["sliding_window"] = 4.5;
  expect_error(j, {"'sliding_window'", "must be an integer"});
  j["sliding_window"] = true;
  expect_error(j, {"'sliding_window'", "must be an integer"});
  j["sliding_window"] = int64_t{1} << 40;
  expect_error(j, {"'sliding_window'", "above the limit"});
  // layer_types that transformers' MistralForCausalLM would ignore and mean something else.
  j = mistral_config();
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  expect_error(j, {"'layer_types'[1]", "full_attention", "ignores layer_types", "ministral"});
  j["sliding_window"] = nullptr;
  expect_error(j, {"'layer_types'[0]", "sliding_attention", "full attention"});
  j["layer_types"] = {"sliding_attention"};
  expect_error(j, {"layer_types", "1 entries"});
  // Layer types that agree with the window are accepted (and not written back).
  j = mistral_config();
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention"};
  EXPECT_FALSE(ModelConfig::from_json(j, "c").to_json().contains("layer_types"));
  j["sliding_window"] = nullptr;
  j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  EXPECT_FALSE(ModelConfig::from_json(j, "c").has_sliding_layers());
  // MistralAttention has no biases; Qwen2's switch is not a Mistral field.
  j = mistral_config();
  j["attention_bias"] = true;
  expect_error(j, {"attention_bias", "Mistral"});
  j = mistral_config();
  j["use_sliding_window"] = true;
  expect_error(j, {"use_sliding_window", "not a Mistral field"});
  // false is harmless (transformers ignores the field): the window still applies.
  j["use_sliding_window"] = false;
  EXPECT_EQ(ModelConfig::from_json(j, "c").layer_window(2), 4);
  // A Mistral built in code with a full layer among sliding ones cannot be written as config.
  ModelConfig m = preset_config("tiny-mistral");
  m.layer_sliding[0] = false;
  EXPECT_THROW(m.validate("code"), InputError);
}

TEST(WindowConfig, MistralLayerOverrideSlidesEveryLayer) {
  ModelConfig c = ModelConfig::from_json(mistral_config(), "c");
  c.set_num_layers(5);
  EXPECT_EQ(c.layer_sliding, std::vector<bool>(5, true));
  c.set_num_layers(1);
  EXPECT_EQ(c.layer_sliding, std::vector<bool>(1, true));
  EXPECT_NO_THROW(c.validate("c"));
  json j = mistral_config();
  j["sliding_window"] = nullptr;
  ModelConfig full = ModelConfig::from_json(j, "c");
  full.set_num_layers(6);  // still no window
  EXPECT_FALSE(full.has_sliding_layers());
  EXPECT_NO_THROW(full.validate("c"));
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
