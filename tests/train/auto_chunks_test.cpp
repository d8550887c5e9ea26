// `layer_chunk: auto` / `head_chunk: auto` in the trainer: the sizes are the planner's choice
// for the run's step, a real run under them stays within memory_budget, and a budget too small
// for any chunk size is a one-line error naming the key.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/planner.h"
#include "support/test_support.h"
#include "train/auto_chunks.h"

namespace sbp {
namespace {

using json = nlohmann::json;

const char* const kTinyModel = test::kTinyChatModelJson;

std::string train_cmd(const test::TempDir& dir, const std::string& args) {
  return test::streambp_binary() + " train " + dir.file("config.yaml") + " " + args;
}

void write_run(const test::TempDir& dir) {
  test::write_text(dir.file("model.json"), kTinyModel);
  test::write_text(
      dir.file("config.yaml"),
      "model: " + dir.file("model.json") + "\ntokenizer: " + test::source_dir() +
          "/examples/tiny-chat\noutput_dir: " + dir.file("out") +
          "\nthreads: 1\nmax_tokens: 2048\nmax_steps: 3\nlayer_chunk: auto\nhead_chunk: auto\n"
          "data:\n  train: " +
          test::source_dir() + "/examples/tiny-chat/train.jsonl\n");
}

TEST(AutoChunks, AreThePlannersChoiceForTheRunsStep) {
  test::TempDir dir;
  test::write_text(dir.file("model.json"), kTinyModel);
  const ModelConfig cfg = resolve_config(dir.file("model.json"));
  TrainConfig c;
  c.layer_chunk = 0;
  c.head_chunk = 0;
  c.max_tokens = 2048;
  c.memory_budget = "4MiB";  // room for about half of T in either chunk
  const ExecConfig exec = parse_mode("stream");
  const ResolvedChunks r = resolve_auto_chunks(c, cfg, exec);
  PlanSetup setup;
  setup.cfg = cfg;
  setup.param_dtype = DType::F32;
  setup.act_dtype = exec.act_dtype;
  setup.adamw = true;
  setup.master_weights = false;
  setup.budget = 4 * 1024 * 1024;
  const ChunkedPlan p = choose_chunks(setup, exec, 2048, ChunkRequest{});
  ASSERT_TRUE(p.fits);
  EXPECT_EQ(r.layer_chunk, p.layer_chunk);
  EXPECT_EQ(r.head_chunk, p.head_chunk);
  EXPECT_EQ(r.planned_peak, p.step.peak_bytes);
  EXPECT_LE(r.planned_peak, r.budget);
  EXPECT_LT(r.layer_chunk, 2048);  // the budget, not T, decided
  EXPECT_LT(r.head_chunk, 2048);
  // A fixed size stays fixed; DPO's reference model takes its weights out of the budget: the
  // plan is the DPO step's, with the reference model's weights beside the policy's.
  c.layer_chunk = 16;
  EXPECT_EQ(resolve_auto_chunks(c, cfg, exec).layer_chunk, 16);
  c.layer_chunk = 0;
  c.objective = ObjectiveKind::dpo;
  const ResolvedChunks d = resolve_auto_chunks(c, cfg, exec);
  setup.objective = c.objective_setup();
  setup.group_size = 2;
  const ChunkedPlan pd = choose_chunks(setup, exec, 2048, ChunkRequest{});
  EXPECT_EQ(d.layer_chunk, pd.layer_chunk);
  EXPECT_EQ(d.head_chunk, pd.head_chunk);
  EXPECT_EQ(pd.step.breakdown[Category::weights], 2 * p.step.breakdown[Category::weights]);
  EXPECT_LE(d.planned_peak, d.budget);
  EXPECT_EQ(d.budget, 4 * 1024 * 1024);
}

// The plan is the run's own step: a context group's busiest rank (its own rows), bf16 weights
// with fp32 master weights, and the optimizer in host memory with offload: optimizer.
TEST(AutoChunks, PlanTheRanksOwnRowsTheRunsDtypesAndItsOffload) {
  test::TempDir dir;
  test::write_text(dir.file("model.json"), kTinyModel);
  const ModelConfig cfg = resolve_config(dir.file("model.json"));
  TrainConfig c;
  c.layer_chunk = 0;
  c.head_chunk = 0;
  c.max_tokens = 4096;
  c.memory_budget = "6MiB";
  const ExecConfig exec = parse_mode("stream");
  auto planned = [&](const ExecConfig& e, int ranks, int cp, DType param, int64_t host_budget) {
    PlanSetup setup;
    setup.cfg = cfg;
    setup.param_dtype = param;
    setup.act_dtype = e.act_dtype;
    setup.adamw = true;
    setup.budget = 6 * 1024 * 1024;
    setup.host_budget = host_budget;
    setup.ranks = ranks;
    setup.context_parallel = cp;
    return choose_chunks(setup, e, 4096, ChunkRequest{});
  };
  const ResolvedChunks one = resolve_auto_chunks(c, cfg, exec);
  c.dist.context_parallel = 2;
  const ResolvedChunks two = resolve_auto_chunks(c, cfg, exec, 2);
  const ChunkedPlan p2 = planned(exec, 2, 2, DType::F32, 0);
  EXPECT_EQ(two.layer_chunk, p2.layer_chunk);
  EXPECT_EQ(two.head_chunk, p2.head_chunk);
  EXPECT_EQ(two.planned_peak, p2.step.peak_bytes);
  // ... which is not the plan of a whole sequence per rank (what it was before).
  const ChunkedPlan whole = planned(exec, 2, 1, DType::F32, 0);
  EXPECT_TRUE(whole.layer_chunk != two.layer_chunk || whole.head_chunk != two.head_chunk ||
              whole.step.peak_bytes != two.planned_peak);
  // Half the rows per rank: chunks at least as large.
  EXPECT_GE(two.layer_chunk, one.layer_chunk);
  EXPECT_GE(two.head_chunk, one.head_chunk);
  c.dist.context_parallel = 1;
  c.precision = Precision::bf16;
  ExecConfig bf16 = exec;
  bf16.act_dtype = DType::BF16;
  const ResolvedChunks b = resolve_auto_chunks(c, cfg, bf16);
  EXPECT_EQ(b.planned_peak, planned(bf16, 1, 1, DType::BF16, 0).step.peak_bytes);
  ExecConfig off = bf16;
  off.offload.optimizer = true;
  c.offload = "optimizer";
  const ResolvedChunks o = resolve_auto_chunks(c, cfg, off);
  const ChunkedPlan po = planned(off, 1, 1, DType::BF16, 0);
  EXPECT_EQ(o.planned_peak, po.step.peak_bytes);
  EXPECT_EQ(po.step.breakdown[Category::optimizer], 0);  // moments and master: in host memory
  EXPECT_GT(po.step.host_breakdown[Category::optimizer], 0);
  EXPECT_GE(o.layer_chunk, b.layer_chunk);  // the optimizer's bytes left the device
}

TEST(AutoChunks, ARealRunStaysWithinTheBudget) {
  test::TempDir dir;
  write_run(dir);
  const int64_t budget = 4 * 1024 * 1024;
  const auto r = test::run_command(train_cmd(dir, "memory_budget=4MiB"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("auto chunks: layer 1024, head 1024"), std::string::npos) << r.output;
  std::istringstream in(test::read_text(dir.file("out/metrics.jsonl")));
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    const json m = json::parse(line);
    if (!m.contains("peak_memory_bytes")) continue;
    EXPECT_LE(m["peak_memory_bytes"]["total"].get<int64_t>(), budget) << line;
    ++steps;
  }
  EXPECT_EQ(steps, 3);
}

TEST(AutoChunks, ABudgetTooSmallNamesTheKey) {
  test::TempDir dir;
  write_run(dir);
  const auto r = test::run_command(train_cmd(dir, "memory_budget=2MiB"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("memory_budget"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("streambp: error: "), std::string::npos) << r.output;
  const auto bad = test::run_command(train_cmd(dir, "layer_chunk=0"));
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("layer_chunk: expected a positive integer or auto"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace sbp
