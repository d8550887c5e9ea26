// Context extension (issue 52): context.rope_scaling and context.max_position_embeddings replace
// the starting model's rope for a run, and the checkpoints' config.json carries the result.
// (That transformers loads such a checkpoint with the same log-probs: HfContextExtension in
// tests/parity/hf_parity_test.cpp, on a committed checkpoint the trainer wrote.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "train/context_extension.h"
#include "train/train_run.h"

namespace sbp {
namespace {

using json = nlohmann::json;

ModelConfig tiny() { return ModelConfig::from_json(json::parse(test::kTinyChatModelJson), "m"); }

TEST(ContextExtension, ReplacesTheRopeAndThePositions) {
  ContextExtension e;
  e.set_rope = true;
  e.rope_scaling = {
      {"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 1024}};
  e.max_position_embeddings = 4096;
  const ModelConfig c = extend_context(tiny(), e, "run.yaml:3");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::yarn);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 1024);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.hidden_size, tiny().hidden_size);  // nothing else changes
  EXPECT_EQ(c.to_json()["rope_scaling"]["rope_type"], "yarn");
  // Back to the default rope.
  ContextExtension none;
  none.set_rope = true;
  EXPECT_EQ(extend_context(c, none, "w").rope_scaling.type, RopeScalingType::none);
  // Nothing given: the model as it was.
  EXPECT_EQ(extend_context(c, ContextExtension{}, "w").to_json(), c.to_json());
}

TEST(ContextExtension, BadFieldsNameTheKeyAndTheField) {
  ContextExtension e;
  e.set_rope = true;
  e.rope_scaling = {{"rope_type", "yarn"}, {"factor", -4}};
  try {
    extend_context(tiny(), e, "run.yaml:3");
    FAIL();
  } catch (const InputError& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("run.yaml:3"), std::string::npos) << m;
    EXPECT_NE(m.find("'factor'"), std::string::npos) << m;
  }
  e.rope_scaling = {{"rope_type", "longrope"}, {"factor", 4}};
  EXPECT_THROW(extend_context(tiny(), e, "w"), InputError);
}

// The trainer end to end: the keys in a YAML file, a checkpoint whose config.json has them.
TEST(ContextExtension, CheckpointConfigCarriesTheExtension) {
  const test::TrainRun run(
      "max_steps: 1\ncontext:\n  rope_scaling:\n    rope_type: yarn\n    factor: 4\n"
      "    original_max_position_embeddings: 1024\n    beta_fast: 16\n    truncate: false\n"
      "  max_position_embeddings: 4096\n");
  const test::CommandResult r = run.train();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json cfg = json::parse(test::read_text(run.out("checkpoint-1/config.json")));
  EXPECT_EQ(cfg["max_position_embeddings"], 4096);
  EXPECT_EQ(cfg["rope_scaling"], json({{"rope_type", "yarn"},
                                       {"factor", 4.0},
                                       {"original_max_position_embeddings", 1024},
                                       {"beta_fast", 16.0},
                                       {"truncate", false}}))
      << cfg["rope_scaling"].dump();
  // A bad value stops the run before anything is trained, naming the line and the field.
  const test::TrainRun bad(
      "max_steps: 1\ncontext:\n  rope_scaling: {rope_type: yarn, factor: 0}\n");
  const test::CommandResult b = bad.train();
  EXPECT_NE(b.exit_code, 0);
  EXPECT_NE(b.output.find("config.yaml:"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("context.rope_scaling"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("'factor'"), std::string::npos) << b.output;
}

// plan's note past the trained positions names the scaling in force (memory is unchanged by it).
TEST(ContextExtension, PlanNoteNamesTheScaling) {
  const std::string fx = test::source_dir() + "/tests/fixtures/hf/";
  const auto note = [&](const std::string& model, int T) {
    const test::CommandResult r =
        test::run_command(test::bin() + " plan --model " + fx + model + "/model --seq-len " +
                          std::to_string(T) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("note: ");
    return at == std::string::npos ? std::string()
                                   : r.output.substr(at, r.output.find('\n', at) - at);
  };
  EXPECT_NE(note("llama_rope_yarn", 100)
                .find("beyond the model's 32 trained positions; rope "
                      "scaling in force: yarn x4 over 32 original "
                      "positions (memory is the same)"),
            std::string::npos);
  EXPECT_NE(note("llama_rope_yarn", 200).find("past max_position_embeddings 128"),
            std::string::npos);
  EXPECT_NE(note("llama_rope_dynamic", 200).find("dynamic NTK x2 beyond 32 positions"),
            std::string::npos);
  EXPECT_NE(note("qwen3_gqa_qknorm", 300).find("quality needs rope scaling"), std::string::npos);
  // llama3: Llama 3.1 was trained to its max_position_embeddings with the scaling.
  EXPECT_EQ(note("llama_rope_llama3", 200), "");
  EXPECT_NE(note("llama_rope_llama3", 300).find("beyond the model's 256 trained positions; rope "
                                                "scaling in force: llama3 x8"),
            std::string::npos);
  EXPECT_EQ(note("llama_rope_yarn", 30), "");
}

}  // namespace
}  // namespace sbp
