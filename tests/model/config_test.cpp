// ModelConfig: parsing Hugging Face config.json (fields, defaults, model-type switches, rope
// scaling), rejecting bad configs with messages that name file and field, presets.
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"
#include "model/parameters.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using json = nlohmann::json;

// A minimal valid Llama config; tests edit fields on a copy.
json base_config() {
  return {{"model_type", "llama"},  {"hidden_size", 64},        {"intermediate_size", 160},
          {"num_hidden_layers", 2}, {"num_attention_heads", 8}, {"vocab_size", 101}};
}

// from_json must throw InputError naming the source and containing every part.
void expect_config_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    ModelConfig::from_json(j, "cfgdir/config.json");
    FAIL() << "expected InputError for " << j.dump();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cfgdir/config.json"), std::string::npos) << msg;
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "wanted '" << p << "' in: " << msg;
  }
}

TEST(ModelConfig, ParsesEveryField) {
  const json j = {{"model_type", "qwen3"},     {"architectures", {"Qwen3ForCausalLM"}},
                  {"hidden_size", 4096},       {"intermediate_size", 12288},
                  {"num_hidden_layers", 36},   {"num_attention_heads", 32},
                  {"num_key_value_heads", 8},  {"head_dim", 128},
                  {"vocab_size", 151936},      {"max_position_embeddings", 40960},
                  {"rms_norm_eps", 1e-6},      {"rope_theta", 1000000.0},
                  {"rope_scaling", nullptr},   {"tie_word_embeddings", false},
                  {"attention_bias", false},   {"torch_dtype", "bfloat16"},
                  {"hidden_act", "silu"},      {"use_sliding_window", false},
                  {"sliding_window", nullptr}, {"bos_token_id", 151643}};
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.model_type, ModelType::qwen3);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.rope_scaling.type == RopeScalingType::none);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_TRUE(c.qk_norm());
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_FALSE(c.o_bias());
  // Uninterpreted fields are kept for writing back.
  EXPECT_EQ(c.extra.at("bos_token_id"), 151643);
  EXPECT_EQ(c.extra.at("architectures"), json::array({"Qwen3ForCausalLM"}));
  EXPECT_FALSE(c.extra.contains("hidden_size"));
}

TEST(ModelConfig, Defaults) {
  const ModelConfig c = ModelConfig::from_json(base_config(), "config.json");
  EXPECT_EQ(c.head_dim, 64 / 8);        // hidden / heads
  EXPECT_EQ(c.num_key_value_heads, 8);  // = heads (multi-head attention)
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.rope_scaling.type == RopeScalingType::none);
  EXPECT_FALSE(c.qk_norm());
  EXPECT_FALSE(c.qkv_bias());
  // Integral floats are accepted as integers.
  json j = base_config();
  j["hidden_size"] = 64.0;
  EXPECT_EQ(ModelConfig::from_json(j, "c").hidden_size, 64);
  // "dtype" is newer transformers' spelling of torch_dtype.
  j["dtype"] = "float16";
  EXPECT_EQ(ModelConfig::from_json(j, "c").torch_dtype, "float16");
}

TEST(ModelConfig, ArchitectureSwitches) {
  json j = base_config();
  j["model_type"] = "qwen2";
  const ModelConfig q2 = ModelConfig::from_json(j, "c");
  EXPECT_TRUE(q2.qkv_bias());  // Qwen2 always has q/k/v biases
  EXPECT_FALSE(q2.o_bias());   // ... and never an o_proj bias
  EXPECT_FALSE(q2.qk_norm());
  j["model_type"] = "llama";
  j["attention_bias"] = true;
  const ModelConfig lb = ModelConfig::from_json(j, "c");
  EXPECT_TRUE(lb.qkv_bias());
  EXPECT_TRUE(lb.o_bias());
  j["model_type"] = "qwen3";
  EXPECT_TRUE(ModelConfig::from_json(j, "c").qk_norm());
}

TEST(ModelConfig, RopeScalingLlama3) {
  for (const char* key : {"rope_type", "type"}) {  // current and legacy spelling
    json j = base_config();
    j["rope_scaling"] = {{key, "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    const ModelConfig c = ModelConfig::from_json(j, "c");
    EXPECT_EQ(c.rope_scaling.type, RopeScalingType::llama3) << key;
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  }
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_TRUE(ModelConfig::from_json(j, "c").rope_scaling.type == RopeScalingType::none);
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  expect_config_error(j, {"longrope", "not supported"});  // no supported family's config uses it
  j["rope_scaling"] = "llama3";
  expect_config_error(j, {"'rope_scaling' must be an object"});
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 4.0},
                       {"high_freq_factor", 4.0}};
  expect_config_error(j, {"high_freq_factor"});  // the formula would divide by zero
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", "8"}};
  expect_config_error(j, {"'factor' must be a number"});
}

TEST(ModelConfig, RopeParametersOfTransformers5) {
  json j = base_config();
  j["model_type"] = "qwen3";
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const ModelConfig c = ModelConfig::from_json(j, "c");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.rope_scaling.type == RopeScalingType::none);
  j["model_type"] = "llama";
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const ModelConfig l = ModelConfig::from_json(j, "c");
  EXPECT_DOUBLE_EQ(l.rope_theta, 5e5);
  EXPECT_EQ(l.rope_scaling.type, RopeScalingType::llama3);
  EXPECT_DOUBLE_EQ(l.rope_scaling.factor, 8.0);
  // Written back in the classic form, which both transformers generations read.
  const ModelConfig back = ModelConfig::from_json(l.to_json(), "c");
  EXPECT_DOUBLE_EQ(back.rope_theta, 5e5);
  EXPECT_EQ(back.rope_scaling.type, RopeScalingType::llama3);
}

TEST(ModelConfig, RejectsBadConfigsNamingFileAndField) {
  json j = base_config();
  j["model_type"] = "gpt2";
  expect_config_error(j, {"unsupported model_type 'gpt2'"});
  j = base_config();
  j.erase("model_type");
  expect_config_error(j, {"'model_type'"});
  for (const char* field : {"hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "vocab_size"}) {
    j = base_config();
    j.erase(field);
    expect_config_error(j, {std::string("missing required field '") + field + "'"});
    j = base_config();
    j[field] = "64";
    expect_config_error(j, {std::string("field '") + field + "' must be an integer"});
    j = base_config();
    j[field] = 0;
    expect_config_error(j, {std::string("field '") + field + "' must be positive"});
  }
  j = base_config();
  j["hidden_size"] = 64.5;
  expect_config_error(j, {"'hidden_size' must be an integer"});
  j["hidden_size"] = 1e300;  // integral but far beyond int64
  expect_config_error(j, {"'hidden_size' must be an integer"});
  j["hidden_size"] = 18446744073709551615ull;
  expect_config_error(j, {"'hidden_size' is out of range"});
  j = base_config();
  j["num_key_value_heads"] = 3;  // 8 heads are not a multiple of 3
  expect_config_error(j, {"num_attention_heads (8)", "num_key_value_heads (3)"});
  j = base_config();
  j["head_dim"] = 7;
  expect_config_error(j, {"head_dim"});
  j = base_config();
  j["rms_norm_eps"] = "small";
  expect_config_error(j, {"'rms_norm_eps' must be a number"});
  j = base_config();
  j["tie_word_embeddings"] = 1;
  expect_config_error(j, {"'tie_word_embeddings' must be true or false"});
  j = base_config();
  j["mlp_bias"] = true;
  expect_config_error(j, {"mlp_bias"});
  j = base_config();
  j["hidden_act"] = "gelu";
  expect_config_error(j, {"hidden_act 'gelu'"});
  j = base_config();
  j["use_sliding_window"] = true;
  expect_config_error(j, {"use_sliding_window"});
  expect_config_error(json::array(), {"must be a JSON object"});
}

// A base config with head_dim explicit, so that heads can move to their limit on their own.
json limits_config() {
  json j = base_config();
  j["head_dim"] = 8;
  return j;
}

TEST(ModelConfigLimits, EveryDimensionAtItsLimitIsAccepted) {
  const std::pair<const char*, int64_t> at_limit[] = {
      {"hidden_size", kMaxHiddenSize},
      {"intermediate_size", kMaxIntermediateSize},
      {"num_hidden_layers", kMaxLayers},
      {"num_attention_heads", kMaxHeads},
      {"head_dim", kMaxHeadDim},
      {"vocab_size", kMaxVocabSize},
      {"max_position_embeddings", kMaxPositionEmbeddings}};
  for (const auto& [field, limit] : at_limit) {
    json j = limits_config();
    j[field] = limit;
    EXPECT_NO_THROW(ModelConfig::from_json(j, "c")) << field << " = " << limit;
  }
  json j = limits_config();  // kv heads at the limit need as many query heads
  j["num_attention_heads"] = kMaxHeads;
  j["num_key_value_heads"] = kMaxHeads;
  EXPECT_NO_THROW(ModelConfig::from_json(j, "c"));
  // The real models are far inside every limit.
  for (const std::string& name : preset_names())
    EXPECT_NO_THROW(preset_config(name).validate(name));
}

TEST(ModelConfigLimits, EachDimensionPastItsLimitIsRefusedNamingTheField) {
  const std::pair<const char*, int64_t> limits[] = {
      {"hidden_size", kMaxHiddenSize},    {"intermediate_size", kMaxIntermediateSize},
      {"num_hidden_layers", kMaxLayers},  {"num_attention_heads", kMaxHeads},
      {"num_key_value_heads", kMaxHeads}, {"head_dim", kMaxHeadDim},
      {"vocab_size", kMaxVocabSize},      {"max_position_embeddings", kMaxPositionEmbeddings}};
  for (const auto& [field, limit] : limits) {
    // One past the limit, and values whose products with the other fields overflow int64.
    for (int64_t v : {limit + 1, int64_t{1} << 40, int64_t{1} << 62, INT64_MAX}) {
      json j = limits_config();
      j[field] = v;
      expect_config_error(j, {std::string("field '") + field + "' is " + std::to_string(v),
                              "above the limit of " + std::to_string(limit)});
    }
  }
  json j = limits_config();
  j["max_position_embeddings"] = -1;
  expect_config_error(j, {"field 'max_position_embeddings' must be positive, got -1"});
}

TEST(ModelConfigLimits, ProductsOfBoundedFieldsAreBoundedToo) {
  // Heads and head_dim each at their limit: the query width (2^24) is past 2^20.
  json j = limits_config();
  j["num_attention_heads"] = kMaxHeads;
  j["head_dim"] = kMaxHeadDim;
  expect_config_error(j, {"num_attention_heads * head_dim (16777216)", "above the limit"});
  // Every matrix dimension at its limit: about 1.4e16 parameters, past 2^48 (~2.8e14), each
  // dimension fine on its own.
  j = limits_config();
  j["hidden_size"] = kMaxHiddenSize;
  j["intermediate_size"] = kMaxIntermediateSize;
  j["num_hidden_layers"] = kMaxLayers;
  j["vocab_size"] = kMaxVocabSize;
  expect_config_error(j, {"parameters, above the limit of 281474976710656"});
}

TEST(ModelConfigLimits, NonFiniteOrAbsurdFloatsAreRefusedNamingTheField) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double theta : {0.0, -10000.0, 0.5, 1.0, 1e39, inf, -inf, nan}) {
    json j = base_config();
    j["rope_theta"] = theta;
    expect_config_error(j, {"field 'rope_theta' must be a finite number in (1, 3.4e38)"});
    // transformers 5 spelling: the same check.
    j = base_config();
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", theta}};
    expect_config_error(j, {"field 'rope_theta'"});
  }
  for (double eps : {0.0, -1e-6, 1.0, 10.0, inf, nan}) {
    json j = base_config();
    j["rms_norm_eps"] = eps;
    expect_config_error(j, {"field 'rms_norm_eps' must be a finite number in (0, 1)"});
  }
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", inf}};
  expect_config_error(j, {"rope_scaling 'factor' must be positive and finite"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"high_freq_factor", inf}};
  expect_config_error(j, {"'high_freq_factor'"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"original_max_position_embeddings", 1LL << 40}};
  expect_config_error(j, {"'original_max_position_embeddings' must be in [1, 2147483648]"});
  // Sane values at the edges are fine.
  j = base_config();
  j["rope_theta"] = 1.0000001;
  j["rms_norm_eps"] = 0.5;
  EXPECT_NO_THROW(ModelConfig::from_json(j, "c"));
}

TEST(ModelConfigLimits, HostileConfigFileFailsInOneLineNamingFileAndField) {
  test::TempDir dir;
  const std::string p = dir.file("config.json");
  // A literal beyond double's range is an out_of_range error of the JSON parser (not a
  // parse_error): refused as invalid JSON, in one line, not an internal error.
  test::write_text(p, R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 101, "rope_theta": 1e999})");
  try {
    ModelConfig::from_file(p);
    FAIL();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(p + ": invalid JSON", 0), 0u) << msg;
    EXPECT_NE(msg.find("1e999"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  json j = base_config();
  j["vocab_size"] = 1LL << 40;
  test::write_text(p, j.dump());
  try {
    resolve_config(dir.path());
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              p + ": field 'vocab_size' is 1099511627776, above the limit of 16777216 "
                  "(docs/MODELS.md, Limits)");
  }
}

TEST(ModelConfigLimits, ConfigsBuiltInCodeGetCheckedArithmetic) {
  // validate() is the gate, but sizes computed from a config it has not seen are checked too.
  ModelConfig c = preset_config("tiny-qwen3");
  c.hidden_size = int64_t{1} << 40;
  c.vocab_size = int64_t{1} << 40;
  EXPECT_THROW(c.num_parameters(), InputError);
  c = preset_config("tiny-qwen3");
  c.num_attention_heads = int64_t{1} << 32;
  c.head_dim = int64_t{1} << 32;
  try {
    parameter_specs(c);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads * head_dim"), std::string::npos)
        << e.what();
  }
}

TEST(ModelConfig, FromFileNamesTheFile) {
  test::TempDir dir;
  const std::string p = dir.file("config.json");
  test::write_text(p, "{\"model_type\": \"llama\", ");
  try {
    ModelConfig::from_file(p);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
  }
  json j = base_config();
  j.erase("vocab_size");
  test::write_text(p, j.dump());
  try {
    ModelConfig::from_file(p);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(p + ": missing required field 'vocab_size'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ModelConfig::from_file(dir.file("absent.json")), InputError);
  test::write_text(p, base_config().dump());
  EXPECT_EQ(resolve_config(dir.path()).hidden_size, 64);
  EXPECT_EQ(resolve_config(p).hidden_size, 64);
  EXPECT_EQ(resolve_config("tiny-qwen3").model_type, ModelType::qwen3);
  EXPECT_THROW(resolve_config(dir.file("nothing-here")), InputError);
}

TEST(ModelConfig, ToJsonRoundTrip) {
  for (const std::string& name : preset_names()) {
    const ModelConfig c = preset_config(name);
    const json j = c.to_json();
    const ModelConfig b = ModelConfig::from_json(j, name);
    EXPECT_EQ(b.to_json(), j) << name;
    EXPECT_EQ(b.num_parameters(), c.num_parameters()) << name;
    EXPECT_EQ(b.rope_scaling.type, c.rope_scaling.type) << name;
    EXPECT_EQ(b.rope_scaling.original_max_position_embeddings,
              c.rope_scaling.original_max_position_embeddings)
        << name;
    EXPECT_EQ(b.rope_inv_freq(), c.rope_inv_freq()) << name;
  }
  // Uninterpreted fields survive.
  json j = base_config();
  j["bos_token_id"] = 1;
  j["transformers_version"] = "4.51.0";
  const json out = ModelConfig::from_json(j, "c").to_json();
  EXPECT_EQ(out.at("bos_token_id"), 1);
  EXPECT_EQ(out.at("transformers_version"), "4.51.0");
  EXPECT_EQ(out.at("architectures"), json::array({"LlamaForCausalLM"}));
}

// pad_token_id as transformers reads it into nn.Embedding's padding_idx: absent or null is none
// (Gemma 3: absent is its config default 0), negative counts from the end as torch's padding_idx
// does, outside [-V, V) is refused naming the field; written back as read.
TEST(ModelConfig, PadTokenIdIsTheEmbeddingsPaddingRow) {
  json j = base_config();  // vocab 101
  EXPECT_EQ(ModelConfig::from_json(j, "c").padding_row(), -1);
  EXPECT_EQ(ModelConfig::from_json(j, "c").to_json().at("pad_token_id"), nullptr);
  j["pad_token_id"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j, "c").padding_row(), -1);
  j["pad_token_id"] = 7;
  EXPECT_EQ(ModelConfig::from_json(j, "c").padding_row(), 7);
  EXPECT_EQ(ModelConfig::from_json(j, "c").to_json().at("pad_token_id"), 7);
  j["pad_token_id"] = -1;
  EXPECT_EQ(ModelConfig::from_json(j, "c").padding_row(), 100);
  EXPECT_EQ(ModelConfig::from_json(j, "c").to_json().at("pad_token_id"), -1);
  for (int64_t bad : {int64_t{101}, int64_t{-102}}) {
    j["pad_token_id"] = bad;
    expect_config_error(j, {"pad_token_id", std::to_string(bad)});
  }
  j["pad_token_id"] = "0";
  expect_config_error(j, {"pad_token_id", "integer"});
  json g = {{"model_type", "gemma3_text"}, {"hidden_size", 48}, {"intermediate_size", 96},
            {"num_hidden_layers", 2},      {"num_attention_heads", 4}, {"vocab_size", 83}};
  EXPECT_EQ(ModelConfig::from_json(g, "g").padding_row(), 0);
  g["pad_token_id"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(g, "g").padding_row(), -1);
  EXPECT_EQ(preset_config("gemma3-1b").padding_row(), 0);
  EXPECT_EQ(preset_config("qwen3-8b").padding_row(), -1);
}

// init (transformers' _init_weights) zeroes the padding row and only it; the test init keeps it.
TEST(ModelConfig, HfInitZeroesThePaddingRow) {
  json j = base_config();
  j["pad_token_id"] = 5;
  const ModelConfig cfg = ModelConfig::from_json(j, "c");
  auto be = test::backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  for (InitStyle style : {InitStyle::hf, InitStyle::test}) {
    ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
    init_parameters(w, 3, style);
    const std::vector<float> e = download_f32(w.views().embed);  // (V, d)
    const int64_t d = cfg.hidden_size;
    for (int64_t r : {int64_t{4}, int64_t{5}, int64_t{6}}) {
      double norm = 0.0;
      for (int64_t c = 0; c < d; ++c) norm += std::fabs(e[static_cast<size_t>(r * d + c)]);
      EXPECT_EQ(norm == 0.0, style == InitStyle::hf && r == 5) << "row " << r;
    }
  }
}

TEST(ModelConfig, PresetsAndParameterCounts) {
  for (const char* name : {"qwen3-0.6b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b",
                           "llama3.1-8b", "tiny-qwen3", "tiny-qwen2", "tiny-llama"}) {
    EXPECT_TRUE(has_preset(name)) << name;
  }
  EXPECT_FALSE(has_preset("gpt-5"));
  try {
    preset_config("gpt-5");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("qwen3-8b"), std::string::npos);  // lists the known
  }
  auto near = [](int64_t n, double want, double tol) { return std::fabs(n - want) <= tol; };
  // Published sizes: Qwen3-8B 8.19B, Qwen3-0.6B 0.596B (tied), Llama-3.1-8B 8.03B.
  EXPECT_TRUE(near(preset_config("qwen3-8b").num_parameters(), 8.19e9, 0.01e9))
      << preset_config("qwen3-8b").num_parameters();
  EXPECT_TRUE(near(preset_config("qwen3-0.6b").num_parameters(), 0.596e9, 0.001e9))
      << preset_config("qwen3-0.6b").num_parameters();
  EXPECT_TRUE(near(preset_config("llama3.1-8b").num_parameters(), 8.03e9, 0.01e9))
      << preset_config("llama3.1-8b").num_parameters();
  // Mistral 7B v0.1: 7.24B (untied, 32000-token vocabulary); v0.3's 32768 tokens add 6.3M.
  EXPECT_TRUE(near(preset_config("mistral-7b-v0.1").num_parameters(), 7.24e9, 0.005e9))
      << preset_config("mistral-7b-v0.1").num_parameters();
  EXPECT_EQ(preset_config("mistral-7b-v0.3").num_parameters() -
                preset_config("mistral-7b-v0.1").num_parameters(),
            2 * 768 * 4096);
  EXPECT_EQ(preset_config("mistral-7b-v0.1").layer_window(31), 4096);
  EXPECT_FALSE(preset_config("mistral-7b-v0.3").has_sliding_layers());
  EXPECT_TRUE(preset_config("qwen3-0.6b").tie_word_embeddings);
  EXPECT_FALSE(preset_config("qwen3-8b").tie_word_embeddings);
  EXPECT_EQ(preset_config("llama3.1-8b").rope_scaling.type, RopeScalingType::llama3);
  // Every preset validates, and num_parameters agrees with the parameter layout.
  for (const std::string& name : preset_names()) {
    const ModelConfig c = preset_config(name);
    EXPECT_NO_THROW(c.validate(name)) << name;
    int64_t n = 0;
    for (const ParamSpec& s : parameter_specs(c)) n += s.shape.numel();
    EXPECT_EQ(n, c.num_parameters()) << name;
  }
}

}  // namespace
}  // namespace sbp
