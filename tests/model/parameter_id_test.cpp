// Typed parameter identity (model/parameter_id.h): every tensor of every family and head, named
// through each table (Hugging Face, GGUF, PEFT) and parsed back to the same identity; the names
// are unique; names the tables do not spell parse to nothing.
#include <gtest/gtest.h>

#include <set>

#include "convert/gguf_arch.h"
#include "dist/grad_groups.h"
#include "model/lora.h"
#include "model/parameters.h"

namespace sbp {
namespace {

// Every preset, and the tiny Llama with attention biases (the only family with o_bias).
std::vector<ModelConfig> every_family() {
  std::vector<ModelConfig> out;
  for (const std::string& name : preset_names()) out.push_back(preset_config(name));
  ModelConfig biased = preset_config("tiny-llama");
  biased.attention_bias = true;
  out.push_back(biased);
  return out;
}

std::string describe(const ParamId& id) {
  return std::string(hf_module_name(id.role)) + " layer " + std::to_string(id.layer);
}

TEST(ParameterId, EveryRoleOfEveryFamilyRoundTripsThroughTheHuggingFaceAndGgufNames) {
  std::set<ParamRole> seen;
  for (const ModelConfig& cfg : every_family()) {
    const NormLayout layout = norm_layout(cfg);
    for (const ModelHead head : {ModelHead::lm, ModelHead::value}) {
      std::set<std::string> hf_names, gguf_names;
      for (const ParamSpec& s : parameter_specs(cfg, head)) {
        seen.insert(s.id.role);
        EXPECT_EQ(s.id.group() == ParamGroup::layer, s.id.layer >= 0) << s.name;
        EXPECT_EQ(hf_name(s.id, layout), s.name);
        EXPECT_EQ(parse_hf_name(s.name, layout), std::optional<ParamId>(s.id)) << s.name;
        EXPECT_TRUE(hf_names.insert(s.name).second) << s.name;
        const std::optional<std::string> g = gguf_name(s.id);
        if (s.id.role == ParamRole::score) {
          EXPECT_FALSE(g.has_value());  // llama.cpp has no value head
          continue;
        }
        ASSERT_TRUE(g.has_value()) << s.name;
        EXPECT_EQ(gguf_tensor_name(cfg, s.id), *g);
        EXPECT_EQ(parse_gguf_name(*g), std::optional<ParamId>(s.id)) << *g;
        EXPECT_TRUE(gguf_names.insert(*g).second) << *g;
      }
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), kParamRoles) << "a role no family has";
}

TEST(ParameterId, TheNamesAreTheCheckpointNames) {
  // A sample of the spellings checkpoints hold, pinned (the tables above round-trip either way).
  const ModelConfig llama = preset_config("tiny-llama");
  const ModelConfig gemma = preset_config("tiny-gemma3");
  const NormLayout plain = norm_layout(llama), sandwich = norm_layout(gemma);
  EXPECT_EQ(plain, NormLayout::plain);
  EXPECT_EQ(sandwich, NormLayout::sandwich);
  EXPECT_EQ(hf_name(model_param(ParamRole::embed), plain), "model.embed_tokens.weight");
  EXPECT_EQ(hf_name(model_param(ParamRole::score), plain), "score.weight");
  EXPECT_EQ(hf_name(layer_param(7, ParamRole::k_bias), plain),
            "model.layers.7.self_attn.k_proj.bias");
  EXPECT_EQ(hf_name(layer_param(2, ParamRole::post_norm), plain),
            "model.layers.2.post_attention_layernorm.weight");
  EXPECT_EQ(hf_name(layer_param(2, ParamRole::post_norm), sandwich),
            "model.layers.2.pre_feedforward_layernorm.weight");
  EXPECT_EQ(hf_name(layer_param(2, ParamRole::attn_out_norm), sandwich),
            "model.layers.2.post_attention_layernorm.weight");
  EXPECT_EQ(*gguf_name(layer_param(2, ParamRole::post_norm)), "blk.2.ffn_norm.weight");
  EXPECT_EQ(*gguf_name(layer_param(2, ParamRole::attn_out_norm)),
            "blk.2.post_attention_norm.weight");
  EXPECT_EQ(*gguf_name(model_param(ParamRole::lm_head)), "output.weight");
}

TEST(ParameterId, NamesNoTableSpellsParseToNothing) {
  for (const char* name :
       {"model.layers.01.mlp.up_proj.weight", "model.layers.-1.mlp.up_proj.weight",
        "model.layers.x.mlp.up_proj.weight", "model.layers.3", "model.layers.3.",
        "model.layers.3.mlp.up_proj.bias", "model.layers.3.mlp.up_proj.weight.x", "lm_head.bias",
        "model.lm_head.weight", "", "model.layers.99999999999999999999.mlp.up_proj.weight"})
    EXPECT_FALSE(parse_hf_name(name, NormLayout::plain).has_value()) << name;
  // Gemma's extra norms are not Llama parameters.
  EXPECT_FALSE(
      parse_hf_name("model.layers.0.post_feedforward_layernorm.weight", NormLayout::plain));
  for (const char* name : {"blk.01.attn_q.weight", "blk.0.attn_q", "blk.0.output.weight",
                           "token_embd.bias", "rope_freqs.weight", "blk..attn_q.weight"})
    EXPECT_FALSE(parse_gguf_name(name).has_value()) << name;
  for (const char* name :
       {"base_model.model.model.layers.0.self_attn.q_proj.weight",
        "base_model.model.model.layers.0.self_attn.q_norm.lora_A.weight",
        "base_model.model.model.layers.0.input_layernorm.lora_B.weight",
        "model.layers.0.self_attn.q_proj.lora_A.weight", "base_model.model.lm_head.lora_A.weight"})
    EXPECT_FALSE(parse_lora_tensor_name(name).has_value()) << name;
}

TEST(ParameterId, EveryAdapterMatrixRoundTripsThroughThePeftNames) {
  for (const ModelConfig& cfg : every_family()) {
    std::set<std::string> names;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      for (int p = 0; p < kLoraTargets; ++p)
        for (const LoraMatrix m : {LoraMatrix::A, LoraMatrix::B}) {
          const LoraId id{l, static_cast<LoraTarget>(p), m};
          const std::string name = lora_tensor_name(id);
          EXPECT_EQ(parse_lora_tensor_name(name), std::optional<LoraId>(id)) << name;
          EXPECT_TRUE(names.insert(name).second) << name;
          // The base weight's name with PEFT's prefix and the matrix in place of ".weight".
          const std::string base =
              hf_name(layer_param(l, lora_base_role(id.target)), norm_layout(cfg));
          EXPECT_EQ(name, "base_model.model." + base.substr(0, base.size() - 7) +
                              (m == LoraMatrix::A ? ".lora_A.weight" : ".lora_B.weight"));
        }
  }
  EXPECT_EQ(lora_tensor_name(3, LoraTarget::down_proj, true),
            "base_model.model.model.layers.3.mlp.down_proj.lora_B.weight");
  EXPECT_STREQ(lora_target_name(LoraTarget::gate_proj), "gate_proj");
}

TEST(ParameterId, GradGroupsFollowTheIdentity) {
  for (const ModelConfig& cfg : every_family()) {
    for (const ModelHead head : {ModelHead::lm, ModelHead::value}) {
      const ParameterSet p = ParameterSet::unallocated(cfg, head);
      const GradGroups g(p);
      ASSERT_EQ(g.layers(), cfg.num_hidden_layers);
      size_t total = g.of(GradGroup::head, -1).size() + g.of(GradGroup::embedding, -1).size();
      for (size_t i : g.of(GradGroup::embedding, -1)) EXPECT_EQ(p.id(i).role, ParamRole::embed);
      for (size_t i : g.of(GradGroup::head, -1)) EXPECT_EQ(p.id(i).group(), ParamGroup::head);
      for (int64_t l = 0; l < g.layers(); ++l) {
        total += g.of(GradGroup::layer, l).size();
        for (size_t i : g.of(GradGroup::layer, l)) EXPECT_EQ(p.id(i).layer, l) << describe(p.id(i));
      }
      EXPECT_EQ(total, p.size());
    }
  }
}

}  // namespace
}  // namespace sbp
