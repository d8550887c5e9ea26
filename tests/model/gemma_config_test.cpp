// Gemma 3 (model_type gemma3_text) configs: both config.json spellings (transformers 5's
// layer_types + rope_parameters per layer type, and the Hub's older sliding_window_pattern +
// rope_theta + rope_local_base_freq), defaults, rejected fields with messages naming file and
// field, config.json written back, parameter names and counts, presets, --layers overrides.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "model/config.h"
#include "model/parameters.h"

namespace sbp {
namespace {

using json = nlohmann::json;

// What transformers 5.24 writes for a small Gemma3TextConfig (save_pretrained).
json gemma_config() {
  return json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "max_position_embeddings": 131072, "model_type": "gemma3_text", "num_attention_heads": 4,
    "num_hidden_layers": 3, "num_key_value_heads": 2, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_parameters": {"full_attention": {"factor": 8.0, "rope_theta": 1000000.0,
                                           "rope_type": "linear"},
                        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
    "sliding_window": 8, "sliding_window_pattern": 2, "tie_word_embeddings": true,
    "transformers_version": "5.24.0", "use_bidirectional_attention": false, "use_cache": true,
    "vocab_size": 128})");
}

void expect_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    ModelConfig::from_json(j, "gemmadir/config.json");
    FAIL() << "expected InputError for " << j.dump();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gemmadir/config.json"), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "wanted '" << p << "' in: " << msg;
  }
}

TEST(GemmaConfig, ParsesTransformers5Spelling) {
  const ModelConfig c = ModelConfig::from_json(gemma_config(), "config.json");
  EXPECT_EQ(c.model_type, ModelType::gemma3_text);
  EXPECT_TRUE(c.gemma());
  EXPECT_TRUE(c.qk_norm());
  EXPECT_TRUE(c.sandwich_norms());
  EXPECT_TRUE(c.gelu_mlp());
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_EQ(c.norm_weight_offset(), 1.0f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(c.layer_window(0), 8);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(2), 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rope_local_base_freq, 1e4);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::linear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.final_logit_softcapping, 30.0);
  EXPECT_EQ(c.attention_scale(), static_cast<float>(1.0 / 16.0));  // 256^-1/2, not 16^-1/2
  EXPECT_EQ(c.embed_scale(), 8.0f);                                // sqrt(64)
  // Global frequencies: theta 1e6 scaled by 1/8; local ones: theta 1e4, unscaled.
  const std::vector<float> g = c.rope_inv_freq(), l = c.rope_inv_freq(true);
  ASSERT_EQ(g.size(), 8u);
  ASSERT_EQ(l.size(), 8u);
  EXPECT_FLOAT_EQ(g[0], 1.0f / 8.0f);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_NEAR(g[1], std::pow(1e6, -2.0 / 16) / 8, 1e-8);
  EXPECT_NEAR(l[1], std::pow(1e4, -2.0 / 16), 1e-7);
}

TEST(GemmaConfig, ParsesOlderSpellingAndDefaults) {
  json j = gemma_config();
  for (const char* k : {"layer_types", "rope_parameters", "final_logit_softcapping",
                        "query_pre_attn_scalar", "max_position_embeddings", "tie_word_embeddings",
                        "sliding_window", "head_dim"})
    j.erase(k);
  j["num_hidden_layers"] = 7;
  j["sliding_window_pattern"] = 3;
  j["rope_theta"] = 5e5;
  j["rope_local_base_freq"] = 777.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>{true, true, false, true, true, false, true}));
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(c.rope_local_base_freq, 777.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::linear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  // Gemma3TextConfig's defaults.
  EXPECT_EQ(c.final_logit_softcapping, 0.0);
  EXPECT_DOUBLE_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 256);
  // No sliding_window_pattern either: every sixth layer is full.
  j.erase("sliding_window_pattern");
  const ModelConfig d = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(d.layer_sliding, (std::vector<bool>{true, true, true, true, true, false, true}));
  // Without any rope field: global 1e6, local 1e4 (not Llama's 1e4 for both).
  j.erase("rope_theta");
  j.erase("rope_local_base_freq");
  j.erase("rope_scaling");
  const ModelConfig e = ModelConfig::from_json(j, "config.json");
  EXPECT_DOUBLE_EQ(e.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(e.rope_local_base_freq, 1e4);
  EXPECT_EQ(e.rope_scaling.type, RopeScalingType::none);
}

TEST(GemmaConfig, RejectsBadFieldsNamingFileAndField) {
  auto with = [](const char* key, json v) {
    json j = gemma_config();
    j[key] = std::move(v);
    return j;
  };
  expect_error(with("hidden_activation", "gelu"), {"hidden_activation", "gelu"});
  expect_error(with("attn_logit_softcapping", 50.0), {"attn_logit_softcapping", "not supported"});
  expect_error(with("final_logit_softcapping", -1.0), {"final_logit_softcapping"});
  expect_error(with("final_logit_softcapping", "30"), {"final_logit_softcapping"});
  expect_error(with("query_pre_attn_scalar", 0), {"query_pre_attn_scalar"});
  expect_error(with("query_pre_attn_scalar", "x"), {"query_pre_attn_scalar", "number"});
  expect_error(with("sliding_window", 0), {"sliding_window", "positive"});
  expect_error(with("sliding_window", 2.5), {"sliding_window", "integer"});
  expect_error(with("layer_types", json::array({"sliding_attention"})),
               {"layer_types", "1 entries", "num_hidden_layers is 3"});
  expect_error(with("layer_types", json::array({"sliding_attention", "chunked", "full_attention"})),
               {"layer_types'[1]", "chunked"});
  expect_error(with("layer_types", "full"), {"layer_types", "array"});
  expect_error(with("use_bidirectional_attention", true), {"use_bidirectional_attention"});
  json j = gemma_config();
  j["rope_parameters"]["full_attention"]["rope_type"] = "longrope";
  expect_error(j, {"rope_parameters.full_attention", "longrope"});
  j = gemma_config();  // transformers ignores truncate inside a per-layer-type entry
  j["rope_parameters"]["full_attention"] = {{"rope_type", "yarn"}, {"factor", 4.0},
                                            {"truncate", false}, {"rope_theta", 1e6}};
  expect_error(j, {"rope_parameters.full_attention", "truncate"});
  j = gemma_config();
  j["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  expect_error(j, {"sliding_attention", "default rope"});
  j = gemma_config();
  j["rope_parameters"]["chunked_attention"] = {{"rope_type", "default"}};
  expect_error(j, {"rope_parameters", "chunked_attention"});
  j = gemma_config();
  j["rope_parameters"]["full_attention"]["factor"] = -2.0;
  expect_error(j, {"factor"});
  j = gemma_config();
  j["rope_parameters"]["sliding_attention"]["rope_theta"] = 0.5;
  expect_error(j, {"rope_local_base_freq"});
  j = gemma_config();
  j.erase("layer_types");
  j["sliding_window_pattern"] = 0;
  expect_error(j, {"sliding_window_pattern"});
  // The multimodal checkpoint gets a pointer to the text model.
  j = gemma_config();
  j["model_type"] = "gemma3";
  expect_error(j, {"'gemma3'", "gemma3_text"});
}

TEST(GemmaConfig, GemmaFieldsOnOtherFamiliesAreRefusedOrKept) {
  // Built in code: a window on a Llama config is a mistake, not silently ignored.
  ModelConfig c = preset_config("tiny-llama");
  c.sliding_window = 4;
  EXPECT_THROW(c.validate("code"), InputError);
  // A Qwen2 config's unused sliding_window is not ours to interpret: written back as it was.
  json q = {{"model_type", "qwen2"},      {"hidden_size", 64},      {"intermediate_size", 96},
            {"num_hidden_layers", 2},     {"num_attention_heads", 4}, {"vocab_size", 50},
            {"use_sliding_window", false}, {"sliding_window", 131072}};
  const json out = ModelConfig::from_json(q, "q").to_json();
  EXPECT_EQ(out.at("sliding_window"), 131072);
  EXPECT_FALSE(out.contains("layer_types"));
}

TEST(GemmaConfig, WrittenBackConfigReadsTheSame) {
  const ModelConfig c = ModelConfig::from_json(gemma_config(), "config.json");
  const json j = c.to_json();
  EXPECT_EQ(j.at("model_type"), "gemma3_text");
  EXPECT_EQ(j.at("architectures"), json::array({"Gemma3ForCausalLM"}));
  EXPECT_EQ(j.at("hidden_activation"), "gelu_pytorch_tanh");
  EXPECT_FALSE(j.contains("hidden_act"));
  EXPECT_FALSE(j.contains("sliding_window_pattern"));  // layer_types is written instead
  EXPECT_EQ(j.at("rope_parameters").at("full_attention").at("rope_type"), "linear");
  EXPECT_EQ(j.at("bos_token_id"), 2);  // uninterpreted fields survive
  // An int, as transformers' strict config class requires (it refuses 256.0).
  EXPECT_TRUE(j.at("query_pre_attn_scalar").is_number_integer());
  EXPECT_TRUE(j.at("sliding_window").is_number_integer());
  const ModelConfig b = ModelConfig::from_json(j, "written");
  EXPECT_EQ(b.to_json(), j);
  EXPECT_EQ(b.layer_sliding, c.layer_sliding);
  EXPECT_EQ(b.rope_inv_freq(), c.rope_inv_freq());
  EXPECT_EQ(b.rope_inv_freq(true), c.rope_inv_freq(true));
  EXPECT_EQ(b.final_logit_softcapping, c.final_logit_softcapping);
  EXPECT_EQ(b.attention_scale(), c.attention_scale());
}

TEST(GemmaConfig, ParameterNamesAndCounts) {
  const ModelConfig c = ModelConfig::from_json(gemma_config(), "config.json");
  std::vector<std::string> names;
  int64_t n = 0;
  for (const ParamSpec& s : parameter_specs(c)) {
    names.push_back(s.name);
    n += s.shape.numel();
  }
  EXPECT_EQ(n, c.num_parameters());
  for (const char* want :
       {"model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight",
        "model.layers.1.pre_feedforward_layernorm.weight",
        "model.layers.1.post_feedforward_layernorm.weight", "model.layers.1.self_attn.q_norm.weight",
        "model.layers.1.self_attn.k_norm.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(std::find(names.begin(), names.end(), "lm_head.weight"), names.end());  // tied
  // Gemma 3 1B as published: 999,885,952 parameters.
  EXPECT_EQ(preset_config("gemma3-1b").num_parameters(), 999885952);
}

// transformers: embed_scale = torch.tensor(hidden_size ** 0.5).to(weight dtype).
TEST(GemmaConfig, EmbedScaleIsRoundedToTheActivationDtype) {
  ModelConfig c = preset_config("gemma3-1b");
  EXPECT_EQ(c.embed_scale(false), static_cast<float>(std::sqrt(1152.0)));  // 33.941...
  EXPECT_EQ(c.embed_scale(true), 34.0f);
  c.hidden_size = 3072;  // the example in transformers' comment: 55.4256 becomes 55.5
  EXPECT_EQ(c.embed_scale(true), 55.5f);
  EXPECT_EQ(preset_config("tiny-qwen3").embed_scale(true), 1.0f);  // other families: none
}

TEST(GemmaConfig, PresetsMatchThePublishedTextConfigs) {
  const ModelConfig a = preset_config("gemma3-1b");
  EXPECT_EQ(a.hidden_size, 1152);
  EXPECT_EQ(a.num_hidden_layers, 26);
  EXPECT_EQ(a.sliding_window, 512);
  EXPECT_EQ(a.rope_scaling.type, RopeScalingType::none);
  EXPECT_EQ(a.vocab_size, 262144);
  for (const char* name : {"gemma3-4b", "gemma3-12b", "gemma3-27b"}) {
    const ModelConfig c = preset_config(name);
    EXPECT_EQ(c.sliding_window, 1024) << name;
    EXPECT_EQ(c.rope_scaling.type, RopeScalingType::linear) << name;
    EXPECT_EQ(c.rope_scaling.factor, 8.0) << name;
    EXPECT_EQ(c.vocab_size, 262208) << name;
    // 5 sliding : 1 full
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      EXPECT_EQ(c.layer_is_sliding(l), (l + 1) % 6 != 0) << name << " layer " << l;
  }
  EXPECT_DOUBLE_EQ(preset_config("gemma3-27b").query_pre_attn_scalar, 168.0);
  EXPECT_EQ(preset_config("gemma3-27b").head_dim, 128);
  EXPECT_NO_THROW(preset_config("tiny-gemma3").validate("tiny-gemma3"));
}

TEST(GemmaConfig, LayerOverrideKeepsThePattern) {
  ModelConfig c = preset_config("gemma3-1b");
  c.set_num_layers(4);  // the first 4 layers of gemma3-1b: all sliding
  EXPECT_EQ(c.layer_sliding, (std::vector<bool>(4, true)));
  c = preset_config("gemma3-1b");
  c.set_num_layers(13);
  EXPECT_EQ(c.layer_sliding.size(), 13u);
  EXPECT_FALSE(c.layer_is_sliding(5));
  EXPECT_FALSE(c.layer_is_sliding(11));
  EXPECT_TRUE(c.layer_is_sliding(12));
  EXPECT_NO_THROW(c.validate("--layers"));
}

}  // namespace
}  // namespace sbp
