// `streambp plan` end to end: the documented JSON, the same numbers as the library, and one-line
// errors with a non-zero exit for budgets that cannot hold one token and for bad arguments.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "plan/planner.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using test::run_command;

std::string plan_cmd(const std::string& args) { return test::streambp_binary() + " plan " + args; }

PlanSetup f32_setup(const char* preset, int64_t budget) {
  PlanSetup s;
  s.cfg = preset_config(preset);
  s.param_dtype = s.act_dtype = DType::F32;
  s.budget = budget;
  return s;
}

TEST(PlanCli, SeqLenReportsPeakAndBreakdownPerMode) {
  test::TempDir tmp;
  auto r =
      run_command(plan_cmd("--model tiny-qwen3 --dtype f32 --seq-len 100 --layer-chunk 16 "
                           "--head-chunk 8 --modes base,checkpoint,stream,recompute+chunked "
                           "--json " +
                           tmp.file("p.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| stream | 100 | 16 | 8 |"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("p.json")));
  ASSERT_EQ(j["modes"].size(), 4u);
  for (const char* name : {"base", "checkpoint", "stream", "recompute+chunked"}) {
    const auto& m = j["modes"][name];
    EXPECT_FALSE(m.contains("max_seq_len")) << name;
    ExecConfig e = parse_mode(name);
    e.layer_chunk = 16;
    e.head_chunk = 8;
    const PlannedStep p = plan_at(f32_setup("tiny-qwen3", 0), e, 100);
    EXPECT_EQ(m["peak_bytes"].get<int64_t>(), p.peak_bytes) << name;
    EXPECT_EQ(m["layer_chunk"].get<int64_t>(), e.layer_chunk_for(100)) << name;
    EXPECT_EQ(m["head_chunk"].get<int64_t>(), e.head_chunk_for(100)) << name;
    int64_t sum = 0;
    for (int c = 0; c < kNumCategories; ++c) {
      const char* cat = category_name(static_cast<Category>(c));
      ASSERT_TRUE(m["breakdown"].contains(cat)) << name << " " << cat;
      EXPECT_EQ(m["breakdown"][cat].get<int64_t>(), p.breakdown.bytes[static_cast<size_t>(c)]);
      sum += m["breakdown"][cat].get<int64_t>();
    }
    EXPECT_EQ(sum, p.peak_bytes) << name;
  }
}

TEST(PlanCli, BudgetSearchesTheLongestSequence) {
  test::TempDir tmp;
  // 3 MiB + 1 MiB reserve: the usable 2 MiB is what the library is asked below.
  auto r =
      run_command(plan_cmd("--model tiny-qwen3 --dtype f32 --budget 3MiB --reserve 1MiB "
                           "--optimizer adamw --json " +
                           tmp.file("p.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("longest T"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("p.json")));
  EXPECT_EQ(j["usable_bytes"].get<int64_t>(), int64_t{2} << 20);
  PlanSetup s = f32_setup("tiny-qwen3", int64_t{2} << 20);
  s.adamw = true;
  int64_t prev = 0;
  for (const char* name : {"base", "checkpoint", "stream"}) {
    const auto& m = j["modes"][name];
    const MaxLenResult lib = find_max_seq_len(s, parse_mode(name), ChunkRequest{});
    EXPECT_EQ(m["max_seq_len"].get<int64_t>(), lib.plan.seq_len) << name;
    EXPECT_EQ(m["layer_chunk"].get<int64_t>(), lib.plan.layer_chunk) << name;
    EXPECT_EQ(m["head_chunk"].get<int64_t>(), lib.plan.head_chunk) << name;
    EXPECT_EQ(m["peak_bytes"].get<int64_t>(), lib.plan.step.peak_bytes) << name;
    EXPECT_LE(m["peak_bytes"].get<int64_t>(), int64_t{2} << 20) << name;
    EXPECT_GT(m["max_seq_len"].get<int64_t>(), prev) << name;  // base < checkpoint < stream
    prev = m["max_seq_len"].get<int64_t>();
  }
}

TEST(PlanCli, BudgetTooSmallForOneTokenSaysWhatDoesNotFit) {
  auto r = run_command(plan_cmd("--model tiny-qwen3 --budget 20KiB --reserve 0"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot hold even a 1-token step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of 'weights'"), std::string::npos) << r.output;
  // With room for the weights, the gradients are what fails.
  r = run_command(plan_cmd("--model tiny-qwen3 --dtype f32 --budget 600KiB --reserve 0"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("of 'grads'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("weights 434.1 KiB"), std::string::npos) << r.output;
}

TEST(PlanCli, BadArgumentsNameTheField) {
  struct Bad {
    const char* args;
    const char* says;
  };
  for (const Bad& b :
       {Bad{"--model tiny-qwen3 --budget '80 gigs'", "--budget"},
        Bad{"--model tiny-qwen3 --budget 1GiB --reserve 2GiB", "--reserve"},
        Bad{"--model tiny-qwen3 --seq-len 3 --objective dpo", "--seq-len: must be between 4"},
        Bad{"--model tiny-qwen3 --seq-len 10 --objective dpo --dpo-loss kto", "--dpo-loss"},
        Bad{"--model tiny-qwen3 --seq-len 10 --objective kto", "--objective"},
        Bad{"--model tiny-qwen3 --seq-len 10 --dtype f16", "--precision"},
        Bad{"--model tiny-qwen3 --seq-len 10 --optimizer sgd", "--optimizer"},
        Bad{"--model tiny-qwen3 --seq-len 10 --layer-chunk big", "--layer-chunk"},
        Bad{"--model tiny-qwen3 --seq-len 10 --head-chunk 0", "--head-chunk"},
        Bad{"--model tiny-qwen3 --seq-len 10 --modes fast", "unknown mode"},
        Bad{"--model tiny-qwen3", "--seq-len or --budget"},
        Bad{"--model no-such-model --seq-len 10", "no-such-model"}}) {
    const auto r = run_command(plan_cmd(b.args));
    EXPECT_EQ(r.exit_code, 1) << b.args << "\n" << r.output;
    EXPECT_NE(r.output.find(b.says), std::string::npos) << b.args << "\n" << r.output;
  }
}

TEST(PlanCli, ConfigFileWithAutoChunksUnderABudget) {
  test::TempDir tmp;
  test::write_text(tmp.file("config.json"), preset_config("tiny-llama").to_json().dump());
  const auto r = run_command(plan_cmd(
      "--model " + tmp.file("config.json") +
      " --seq-len 3000 --budget 30MiB --reserve 2MiB --modes stream --json " + tmp.file("p.json")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("p.json")));
  const auto& m = j["modes"]["stream"];
  EXPECT_TRUE(m["fits"].get<bool>());
  PlanSetup s;
  s.cfg = preset_config("tiny-llama");
  s.budget = (int64_t{30} << 20) - (int64_t{2} << 20);
  const ChunkedPlan p = choose_chunks(s, parse_mode("stream"), 3000, ChunkRequest{});
  EXPECT_EQ(m["layer_chunk"].get<int64_t>(), p.layer_chunk);
  EXPECT_EQ(m["head_chunk"].get<int64_t>(), p.head_chunk);
  EXPECT_EQ(m["peak_bytes"].get<int64_t>(), p.step.peak_bytes);
}

}  // namespace
}  // namespace sbp
