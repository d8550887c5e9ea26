// `streambp gradcheck --objective ...` and `streambp bench --objective ...` end to end on tiny
// models: every objective's modes agree with base, the JSON carries the objective's metrics,
// and the bench's logits peak in stream mode is one head block.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sbp {
namespace {

std::string bin() { return test::streambp_binary(); }

TEST(ObjectiveCli, GradcheckEveryObjective) {
  test::TempDir tmp;
  for (const std::string obj : {"dpo --dpo-loss hinge --beta 0.05", "grpo --grpo-loss bnpo",
                                "grpo --beta 0 --entropy-coef 0.01", "ppo"}) {
    const auto r = test::run_command(
        bin() +
        " gradcheck --model tiny-qwen3 --seq-len 40 --segments 4 --group-size 2"
        " --layer-chunk 7 --head-chunk 5 --modes checkpoint,stream --tolerance 1e-5"
        " --json " +
        tmp.file("g.json") + " --objective " + obj);
    ASSERT_EQ(r.exit_code, 0) << obj << "\n" << r.output;
    const auto j = nlohmann::json::parse(test::read_text(tmp.file("g.json")));
    EXPECT_LT(j["max_rel_err"].get<double>(), 1e-5) << obj;
    EXPECT_TRUE(j["base_metrics"].contains("loss")) << obj;
    if (obj == "ppo") {
      EXPECT_TRUE(j["per_param"].contains("value:score.weight"));
    }
  }
  // GRPO with the default --segments 1: the batch still holds one whole group (a group of one
  // has no spread, and its loss used to be NaN); a group of one is refused. T=12: 3 tokens per
  // completion, so that some scored row attends to two keys (with 2, the q/k gradients are
  // zero in exact arithmetic and each mode's rounding noise is all there is to compare). The
  // default chunks (T/4 + 1, T/3 + 1) split the batch.
  const auto one = test::run_command(bin() +
                                     " gradcheck --model tiny-qwen3 --seq-len 12 --objective grpo"
                                     " --modes stream --json " + tmp.file("g.json"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("T=12 in 4 segment(s)"), std::string::npos) << one.output;
  EXPECT_NE(one.output.find("stream                      4        5"), std::string::npos)
      << one.output;
  EXPECT_LT(nlohmann::json::parse(test::read_text(tmp.file("g.json")))["max_rel_err"].get<double>(),
            1e-5);
  const auto lone = test::run_command(bin() + " gradcheck --model tiny-qwen3 --objective grpo"
                                              " --group-size 1 2>&1");
  EXPECT_NE(lone.output.find("--group-size must be >= 2"), std::string::npos) << lone.output;
  const auto bad = test::run_command(bin() + " gradcheck --model tiny-qwen3 --objective rlhf");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("unknown objective"), std::string::npos) << bad.output;
}

// Gemma 3 (tiny-gemma3: window 5 below the segment lengths, a sliding and a full layer, soft-
// capped logits, tied embeddings) through every objective, in every mode gradcheck knows
// (checkpoint, stream, recompute+chunked against base), with chunks that do not divide T.
TEST(ObjectiveCli, GradcheckGemmaEveryObjective) {
  test::TempDir tmp;
  for (const std::string obj : {"sft", "dpo", "grpo", "ppo"}) {
    const auto r = test::run_command(
        bin() +
        " gradcheck --model tiny-gemma3 --seq-len 40 --segments 4 --group-size 2"
        " --layer-chunk 7 --head-chunk 5 --tolerance 1e-5 --json " +
        tmp.file("g.json") + " --objective " + obj);
    ASSERT_EQ(r.exit_code, 0) << obj << "\n" << r.output;
    const auto j = nlohmann::json::parse(test::read_text(tmp.file("g.json")));
    EXPECT_LT(j["max_rel_err"].get<double>(), 1e-5) << obj;
    EXPECT_TRUE(j["per_param"].contains("model.layers.1.post_feedforward_layernorm.weight"))
        << obj;
  }
}

TEST(ObjectiveCli, BenchReportsOneHeadBlockOfLogits) {
  test::TempDir tmp;
  const auto r =
      test::run_command(bin() +
                        " bench --model tiny-qwen3 --objective dpo --seq-len 64 --head-chunk 8"
                        " --modes checkpoint,stream --repeat 1 --json " +
                        tmp.file("b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("logits peak"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("b.json")));
  for (const auto& run : j["runs"]) {
    if (run["mode"] == "stream")
      EXPECT_EQ(run["logits_peak_bytes"].get<int64_t>(),
                run["head_block_logits_bytes"].get<int64_t>());
    else
      EXPECT_EQ(run["logits_peak_bytes"].get<int64_t>(), 64 * 97 * 4);
  }
}

}  // namespace
}  // namespace sbp
