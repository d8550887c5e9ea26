// Every execution mode gives base's loss and gradients (fp32, ~1e-5 relative), for
// architectures covering GQA, qk-norm, attention biases, tied/untied embeddings, llama3
// rope scaling, Gemma 3 (sandwich norms, GeGLU, sliding windows, soft-capped logits), Qwen2's
// and Mistral's sliding windows (on the model's one rope), several segments, and chunk sizes
// 1, 7, T/3, T and sizes that do not divide T.
#include <gtest/gtest.h>

#include "check/gradcheck.h"
#include "check/random_batches.h"
#include "support/test_support.h"

namespace sbp {
namespace {

struct Case {
  const char* name;
  ModelConfig cfg;
};

ModelConfig qwen3_with_bias() {
  ModelConfig c = preset_config("tiny-qwen3");
  c.attention_bias = true;  // q, k, v and o biases on top of qk-norm
  c.tie_word_embeddings = true;
  return c;
}

ModelConfig mqa_llama() {
  ModelConfig c = preset_config("tiny-llama");
  c.num_key_value_heads = 1;  // multi-query attention
  c.num_hidden_layers = 3;
  return c;
}

// Gemma 3 with multi-query attention, attention biases, an untied head, no soft-capping, and
// layers sliding, sliding, full with a window of 3 (shorter than every segment but the
// smallest chunk sizes).
ModelConfig gemma3_mqa_bias() {
  ModelConfig c = preset_config("tiny-gemma3");
  c.num_key_value_heads = 1;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  c.final_logit_softcapping = 0.0;
  c.sliding_window = 3;
  c.num_hidden_layers = 3;
  c.layer_sliding = {true, true, false};
  c.validate("gemma3_mqa_bias");
  return c;
}

// Qwen2 with use_sliding_window: layer 0 full (max_window_layers 1), layers 1 and 2 a window
// of 4, on the model's one rope (no local rope table, unlike Gemma).
ModelConfig qwen2_window() {
  ModelConfig c = preset_config("tiny-qwen2");
  c.num_hidden_layers = 3;
  c.sliding_window = 4;
  c.layer_sliding = {false, true, true};
  c.validate("qwen2_window");
  return c;
}

std::vector<Case> cases() {
  return {{"qwen3_gqa_qknorm_untied", preset_config("tiny-qwen3")},
          {"qwen2_bias_tied", preset_config("tiny-qwen2")},
          {"llama_rope_scaling", preset_config("tiny-llama")},
          {"qwen3_bias_tied", qwen3_with_bias()},
          {"llama_mqa", mqa_llama()},
          // window 5, sliding + full layers, linear rope on the full one, soft-capped logits,
          // tied embeddings, GQA
          {"gemma3_window_softcap", preset_config("tiny-gemma3")},
          {"gemma3_mqa_bias", gemma3_mqa_bias()},
          {"qwen2_window", qwen2_window()},
          // every layer a window of 5, GQA, untied head
          {"mistral_window", preset_config("tiny-mistral")}};
}

class ModeEquality : public ::testing::TestWithParam<size_t> {};

TEST_P(ModeEquality, EveryModeMatchesBase) {
  const Case c = cases()[GetParam()];
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  ParameterSet w(c.cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 7, InitStyle::test, 0.2f);
  const int64_t T = 41;
  for (int64_t segments : {1, 4}) {
    const Batch batch =
        cli::random_batch(c.cfg.vocab_size, T, segments, 11 + segments, segments > 1);
    cli::GradcheckOptions opts;
    opts.modes = test::equality_modes(T, {{T - 1, 2}});
    const cli::GradcheckResult r = cli::run_gradcheck(*backend_, c.cfg, w, batch, opts);
    EXPECT_GT(r.base_loss, 0.0);
    for (const cli::ModeResult& m : r.modes) {
      EXPECT_LT(m.max_rel_err, 1e-5)
          << c.name << " segments=" << segments << " mode=" << m.mode
          << " layer_chunk=" << m.layer_chunk << " head_chunk=" << m.head_chunk;
      for (const auto& [name, err] : m.per_param)
        EXPECT_LT(err, 1e-5) << c.name << " " << m.mode << " lc=" << m.layer_chunk << " " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, ModeEquality, ::testing::Range<size_t>(0, 9),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return std::string(cases()[i.param].name);
                         });

}  // namespace
}  // namespace sbp
