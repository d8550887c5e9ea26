// LoRA adapters' gradients (model/lora.h), through the step runner `train` runs:
//  - every execution mode gives base's loss and adapter gradients (fp32, 1e-5 relative) for SFT,
//    DPO, GRPO and PPO, several target sets, chunk sizes 1, 7, T/3, T and ones that do not
//    divide T, so the streamed per-chunk contributions to dA and dB (k_proj/v_proj's included,
//    whose dK/dV accumulate across chunks) add up to ordinary backprop's;
//  - the base weights get no gradient: the ledger's `grads` category holds the adapters'
//    gradients (and a PPO value model's) and nothing else;
//  - an independent reference: folding the adapters into the weights (W' = W + s B A) gives the
//    same loss, and the full model's gradient dW' gives the adapters' by the chain rule,
//    dB = s dW' A^T, dA = s B^T dW' (computed here in float64). For DPO the merged policy is
//    checked against the base weights as a separate reference model: the LoRA step's
//    "reference = base with adapters off" is that model.
#include <gtest/gtest.h>

#include <cmath>

#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "model/lora_merge.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Case {
  std::string name;
  const char* preset;
  cli::GradcheckOptions options;  // objective, group size, LoRA
  std::vector<int64_t> segments;  // two layouts
};

LoraConfig lora(int64_t r, std::vector<std::string> targets, bool rslora = false) {
  LoraConfig c;
  c.r = r;
  c.alpha = 2.0 * static_cast<double>(r);
  c.use_rslora = rslora;
  c.target_modules = std::move(targets);
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  cli::GradcheckOptions sft;
  sft.objective.kind = ObjectiveKind::sft;
  sft.lora = lora(8, {"all-linear"});
  out.push_back({"sft_qwen3_all_linear", "tiny-qwen3", sft, {1, 3}});
  sft.lora = lora(4, {"k_proj", "v_proj"}, /*rslora=*/true);
  out.push_back({"sft_llama_kv_rslora", "tiny-llama", sft, {1, 4}});
  sft.lora = lora(3, {"q_proj", "k_proj", "v_proj", "o_proj"});
  out.push_back({"sft_qwen2_bias_attention", "tiny-qwen2", sft, {2, 5}});
  sft.lora = lora(5, {"gate_proj", "up_proj", "down_proj", "o_proj"});
  out.push_back({"sft_gemma3_mlp", "tiny-gemma3", sft, {1, 3}});

  cli::GradcheckOptions dpo;
  dpo.objective.kind = ObjectiveKind::dpo;
  dpo.objective.dpo.beta = 0.5;
  dpo.lora = lora(8, {"all-linear"});
  out.push_back({"dpo_qwen3_all_linear", "tiny-qwen3", dpo, {2, 6}});

  cli::GradcheckOptions grpo;
  grpo.objective.kind = ObjectiveKind::grpo;
  grpo.group_size = 3;
  grpo.objective.grpo.beta = 0.04;
  grpo.lora = lora(8, {"q_proj", "k_proj", "v_proj", "down_proj"});
  out.push_back({"grpo_qwen3_beta", "tiny-qwen3", grpo, {6, 3}});

  cli::GradcheckOptions ppo;
  ppo.objective.kind = ObjectiveKind::ppo;
  ppo.lora = lora(8, {"all-linear"});
  out.push_back({"ppo_qwen3_all_linear", "tiny-qwen3", ppo, {3, 5}});
  return out;
}

class LoraModeEquality : public ::testing::TestWithParam<size_t> {};

TEST_P(LoraModeEquality, EveryModeMatchesBaseAndBaseIsFrozen) {
  const Case c = cases()[GetParam()];
  const ModelConfig cfg = preset_config(c.preset);
  Ledger ledger;
  const std::unique_ptr<Backend> be = test::backend();
  Pool pool(ledger, *be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 7, InitStyle::test, 0.2f);
  // The adapters' gradient bytes, and a PPO value model's full gradients beside them.
  Ledger probe_ledger;
  Pool probe(probe_ledger, *be);
  const LoraSet adapter_grads(cfg, c.options.lora, probe, Category::grads, DType::F32, false);
  int64_t expected_grads = adapter_grads.numel() * 4;
  if (c.options.objective.needs_value_model())
    expected_grads +=
        ParameterSet(cfg, probe, Category::grads, DType::F32, false, ModelHead::value).numel() * 4;
  const int64_t T = 41;
  for (int64_t segments : c.segments) {
    const Batch batch =
        c.options.objective.kind == ObjectiveKind::sft
            ? cli::random_batch(cfg.vocab_size, T, segments, 3 + segments, true)
            : cli::random_objective_batch(c.options.objective.kind, c.options.group_size,
                                          cfg.vocab_size, T, segments, 3 + segments);
    cli::GradcheckOptions opts = c.options;
    opts.modes = test::equality_modes(T);
    opts.seed = 17;
    const cli::GradcheckResult r = cli::run_gradcheck(*be, cfg, w, batch, opts);
    EXPECT_TRUE(std::isfinite(r.base_loss)) << c.name;
    EXPECT_NE(r.base_loss, 0.0) << c.name;
    ASSERT_FALSE(r.modes.empty());
    const size_t value_tensors = c.options.objective.needs_value_model()
                                     ? ParameterSet::unallocated(cfg, ModelHead::value).size()
                                     : 0;
    EXPECT_EQ(r.modes.front().per_param.size(), adapter_grads.size() + value_tensors)
        << c.name << ": the adapters' gradients (and the value model's) are compared, nothing else";
    for (const cli::ModeResult& m : r.modes) {
      EXPECT_LT(std::fabs(m.loss - r.base_loss), 1e-5 * std::max(1.0, std::fabs(r.base_loss)))
          << c.name << " segments=" << segments << " " << m.mode << " lc=" << m.layer_chunk
          << " hc=" << m.head_chunk;
      EXPECT_EQ(m.grads_bytes, expected_grads)
          << c.name << " " << m.mode << ": the base weights must have no gradient buffers";
      for (const auto& [name, err] : m.per_param)
        EXPECT_LT(err, 1e-5) << c.name << " segments=" << segments << " " << m.mode
                             << " lc=" << m.layer_chunk << " hc=" << m.head_chunk << " " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, LoraModeEquality, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return cases()[i.param].name;
                         });

// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" -> the base weight's name.
std::string base_name(const std::string& lora_name) {
  std::string n = lora_name.substr(std::string("base_model.model.").size());
  return n.substr(0, n.find(".lora_")) + ".weight";
}

// The adapters' gradients in base mode against the merged model's full gradient (chain rule).
void check_against_merged(const char* preset, ObjectiveKind kind, const LoraConfig& lc) {
  const ModelConfig cfg = preset_config(preset);
  Ledger ledger;
  const std::unique_ptr<Backend> be = test::backend();
  Pool pool(ledger, *be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 11, InitStyle::test, 0.2f);
  LoraSet ad(cfg, lc, pool, Category::weights, DType::F32, false);
  init_lora(ad, 5, 0.05f);
  ParameterSet merged(cfg, pool, Category::weights, DType::F32, false);
  for (size_t i = 0; i < w.size(); ++i) be->copy(merged.tensor(i), w.tensor(i));
  merge_lora(merged, ad, *be);

  cli::GradcheckOptions opts;
  opts.objective.kind = kind;
  opts.objective.dpo.beta = 0.5;
  opts.seed = 3;
  opts.lora = lc;
  const int64_t T = 40;
  const Batch batch = kind == ObjectiveKind::sft
                          ? cli::random_batch(cfg.vocab_size, T, 3, 9, true)
                          : cli::random_objective_batch(kind, 4, cfg.vocab_size, T, 4, 9);
  const MicroBatch mb = cli::gradcheck_micro_batch(*be, cfg, w, nullptr, batch, opts, &ad);
  const ExecConfig base = parse_mode("base");
  const ExecConfig stream = parse_mode("stream");
  const bool dpo = kind == ObjectiveKind::dpo;
  // LoRA: reference = base weights with the adapters off (none passed). Merged: the base
  // weights as a separate reference model.
  const cli::ModeGrads g_lora =
      cli::gradcheck_step(*be, cfg, w, nullptr, nullptr, mb, stream, opts, &ad);
  cli::GradcheckOptions full = opts;
  full.lora = LoraConfig{.r = 0};
  const cli::ModeGrads g_full =
      cli::gradcheck_step(*be, cfg, merged, dpo ? &w : nullptr, nullptr, mb, base, full);
  EXPECT_NEAR(g_lora.result.loss, g_full.result.loss, 1e-5 * std::fabs(g_full.result.loss))
      << preset;

  const float s = ad.scale();
  for (size_t i = 0; i + 1 < ad.size(); i += 2) {
    const std::string& an = ad.name(i);  // lora_A, then its lora_B
    ASSERT_NE(an.find(".lora_A."), std::string::npos);
    size_t wi = 0;
    while (w.name(wi) != base_name(an)) ++wi;
    const std::vector<float> A = download_f32(ad.tensor(i)), B = download_f32(ad.tensor(i + 1));
    const std::vector<float>& dW = g_full.grads[wi];
    const int64_t r = ad.tensor(i).rows(), in = ad.tensor(i).cols(), out = ad.tensor(i + 1).rows();
    std::vector<float> dA(static_cast<size_t>(r * in)), dB(static_cast<size_t>(out * r));
    for (int64_t k = 0; k < r; ++k)
      for (int64_t c = 0; c < in; ++c) {
        double acc = 0.0;  // (B^T dW)[k, c]
        for (int64_t o = 0; o < out; ++o) acc += double(B[o * r + k]) * dW[o * in + c];
        dA[k * in + c] = static_cast<float>(s * acc);
      }
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < r; ++k) {
        double acc = 0.0;  // (dW A^T)[o, k]
        for (int64_t c = 0; c < in; ++c) acc += double(dW[o * in + c]) * A[k * in + c];
        dB[o * r + k] = static_cast<float>(s * acc);
      }
    EXPECT_LT(test::rel_err(g_lora.grads[i].data(), dA.data(), r * in), 1e-5)
        << preset << " " << an;
    EXPECT_LT(test::rel_err(g_lora.grads[i + 1].data(), dB.data(), out * r), 1e-5)
        << preset << " " << ad.name(i + 1);
  }
}

TEST(LoraMergedReference, SftQwen3AllLinear) {
  check_against_merged("tiny-qwen3", ObjectiveKind::sft, lora(8, {"all-linear"}));
}
TEST(LoraMergedReference, SftLlamaRsloraQV) {
  check_against_merged("tiny-llama", ObjectiveKind::sft, lora(4, {"q_proj", "v_proj"}, true));
}
TEST(LoraMergedReference, DpoReferenceIsTheBaseWeights) {
  check_against_merged("tiny-qwen3", ObjectiveKind::dpo, lora(8, {"all-linear"}));
}

TEST(LoraConfigTest, RejectsDropoutUnknownModulesAndZeroRank) {
  LoraConfig c = lora(8, {"q_proj"});
  c.dropout = 0.05;
  EXPECT_THROW(c.validate(), InputError);
  c.dropout = 0.0;
  c.target_modules = {"qkv_proj"};
  EXPECT_THROW(c.validate(), InputError);
  c.target_modules = {"q_proj"};
  c.r = 0;
  EXPECT_THROW(c.validate(), InputError);
  c.r = 16;
  EXPECT_FLOAT_EQ(c.scale(), 1.0f);  // alpha 16 / r 16
  c.use_rslora = true;
  EXPECT_FLOAT_EQ(c.scale(), 4.0f);  // 16 / sqrt(16)
}

TEST(LoraConfigTest, PeftNamesAndInitialisation) {
  EXPECT_EQ(lora_tensor_name(3, LoraTarget::down_proj, true),
            "base_model.model.model.layers.3.mlp.down_proj.lora_B.weight");
  const ModelConfig cfg = preset_config("tiny-qwen3");
  Ledger ledger;
  const std::unique_ptr<Backend> be = test::backend();
  Pool pool(ledger, *be);
  LoraSet ad(cfg, lora(8, {"all-linear"}), pool, Category::weights, DType::F32, false);
  EXPECT_EQ(ad.size(), static_cast<size_t>(cfg.num_hidden_layers * 7 * 2));
  init_lora(ad, 1);
  for (size_t i = 0; i < ad.size(); ++i) {
    const std::vector<float> v = download_f32(ad.tensor(i));
    const bool is_b = ad.name(i).find("lora_B") != std::string::npos;
    const double bound = 1.0 / std::sqrt(static_cast<double>(ad.tensor(i).cols()));
    double maxabs = 0.0;
    for (float x : v) maxabs = std::max(maxabs, std::fabs(double(x)));
    if (is_b)
      EXPECT_EQ(maxabs, 0.0) << ad.name(i);  // PEFT: B = 0, the adapted model starts as the base
    else
      EXPECT_TRUE(maxabs <= bound && maxabs > 0.5 * bound) << ad.name(i);
  }
}

}  // namespace
}  // namespace sbp
