// `mpirun -np N streambp train` beyond equivalence: gradients are reduced once per parameter
// tensor per optimizer step (per micro-batch with ZeRO-2), never per chunk; only rank 0 speaks;
// checkpoints resume exactly on the same number of ranks and re-shard onto another number (or
// one process); an error on the ranks is one line naming the rank, and ends the run.
#include <gtest/gtest.h>

#include <filesystem>

#include "dist/dist_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_test::TrainDir;
using nlohmann::json;

const std::string kSftYaml =
    "data:\n  train: " + test::source_dir() +
    "/examples/tiny-chat/train.jsonl\nmax_tokens: 128\nhead_chunk: 8\noptim:\n  lr: 0.0001\n  "
    "eps: 0.001\n";  // Adam's eps: see dist_equivalence_test.cpp
constexpr int64_t kTensors = 24;  // the tiny qwen3: embedding, 2 x 11 layer tensors, final norm
constexpr int64_t kValueTensors = 25;  // its value model: + score.weight
constexpr int64_t kParamBytes = 35040 * 4;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(DistTrain, OneReductionPerTensorPerStepWhateverTheChunksAndMicroBatches) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml + "max_steps: 2\ngrad_accum: 3\n");
  // ~30 chunks per layer with every stage; one chunk per layer with zero 0: the same counts.
  for (const auto& [zero, layer_chunk] :
       {std::pair{0, 4}, std::pair{1, 4}, std::pair{2, 4}, std::pair{0, 1024}}) {
    {
      const std::string name =
          std::string("z") + std::to_string(zero) + "-" + std::to_string(layer_chunk);
      const auto r = run.train(
          2, name,
          "dist.zero=" + std::to_string(zero) + " layer_chunk=" + std::to_string(layer_chunk));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      for (const json& l : dist_test::read_metrics(run.out(name + "/metrics.jsonl"))) {
        ASSERT_EQ(l["micro_batches"], 6);
        // zero 0/1 reduce the sum of a rank's 3 micro-batches once; zero 2 reduces each one's.
        const int64_t per_step = zero == 2 ? 3 : 1;
        EXPECT_EQ(l["dist/grad_reductions"], kTensors * per_step) << name;
        EXPECT_EQ(l["dist/grad_reduced_bytes"], kParamBytes * per_step) << name;
        EXPECT_EQ(l["dist/param_allgathers"], zero == 0 ? 0 : kTensors) << name;
      }
    }
  }
  // PPO reduces the value model's gradients too, on their own.
  TrainDir ppo("objective: ppo\ndata:\n  train: " + test::source_dir() +
               "/examples/data/grpo.jsonl\nmax_tokens: 200\nlayer_chunk: 8\nmax_steps: 2\n");
  const auto r = ppo.train(2, "ppo", "dist.zero=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const json& l : dist_test::read_metrics(ppo.out("ppo/metrics.jsonl"))) {
    EXPECT_EQ(l["dist/grad_reductions"], kTensors);
    EXPECT_EQ(l["dist/value_grad_reductions"], kValueTensors);
  }
}

TEST(DistTrain, EvaluationIsSplitOverTheRanksAndSummed) {
  SKIP_WITHOUT_MPIRUN();
  // 10 held-out conversations (several eval batches, split over the ranks); the 5 DPO pairs.
  const std::string dpo = test::source_dir() + "/examples/data/dpo.jsonl";
  for (const auto& [yaml, args] :
       {std::pair{kSftYaml + "max_steps: 2\neval_every: 1\n",
                  std::string("data.eval_fraction=0.1")},
        std::pair{"objective: dpo\nmax_tokens: 256\nmax_steps: 2\neval_every: 1\ndata:\n  train: " +
                      dpo + "\n  eval: " + dpo + "\n",
                  std::string()}}) {
    TrainDir run(yaml);
    auto r = run.train(0, "one", args + " grad_accum=2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = run.train(2, "two", args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<json> a = dist_test::read_metrics(run.out("one/metrics.jsonl"));
    const std::vector<json> b = dist_test::read_metrics(run.out("two/metrics.jsonl"));
    ASSERT_EQ(a.size(), 3u);  // step 0 (before training), 1, 2
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(a[i].contains("eval_loss")) << a[i].dump();
      EXPECT_NEAR(b[i]["eval_loss"].get<double>(), a[i]["eval_loss"].get<double>(),
                  1e-6 * a[i]["eval_loss"].get<double>());
    }
  }
}

TEST(DistTrain, OnlyRankZeroPrintsAndWritesMetricsAndTheModel) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml + "max_steps: 2\n");
  const auto r = run.train(2, "out", "dist.zero=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "data parallel: 2 ranks, zero 2, 1 micro-batch per rank per step"), 1u)
      << r.output;
  EXPECT_EQ(count(r.output, "training: 2 steps of 2 micro-batches"), 1u) << r.output;
  EXPECT_EQ(count(r.output, "saved "), 1u) << r.output;
  EXPECT_EQ(dist_test::read_metrics(run.out("out/metrics.jsonl")).size(), 2u);
  for (const char* f :
       {"model.safetensors", "config.json", "trainer_state.json",
        "optimizer-rank00000-of-00002.safetensors", "optimizer-rank00001-of-00002.safetensors"})
    EXPECT_TRUE(fs::exists(run.out("out/checkpoint-2/") + f)) << f;
  EXPECT_FALSE(fs::exists(run.out("out/checkpoint-2/optimizer.safetensors")));
  EXPECT_EQ(json::parse(test::read_text(run.out("out/checkpoint-2/trainer_state.json")))["ranks"],
            2);
}

// 4 straight steps and 2 + resume + 2 on 2 ranks: the same weight and optimizer-shard bytes.
void expect_exact_resume(const std::string& yaml, const std::string& args, bool value_model) {
  TrainDir run(yaml);
  auto r = run.train(2, "straight", args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(2, "split", args + " stop_after_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(2, "split", args + " --resume " + run.out("split"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(fs::exists(run.out("straight/checkpoint-4/value_model/model.safetensors")),
            value_model);
  for (const std::string dir : {"", "value_model/"}) {
    if (dir == "value_model/" && !value_model) continue;
    for (const std::string f : {"model.safetensors", "optimizer-rank00000-of-00002.safetensors",
                                "optimizer-rank00001-of-00002.safetensors"})
      EXPECT_TRUE(dist_test::same_bytes(run.out("straight/checkpoint-4/" + dir + f),
                                        run.out("split/checkpoint-4/" + dir + f)))
          << dir << f;
  }
  const std::vector<json> a = dist_test::read_metrics(run.out("straight/metrics.jsonl"));
  const std::vector<json> b = dist_test::read_metrics(run.out("split/metrics.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
}

TEST(DistTrain, ResumeOnTheSameRanksIsExactZeroTwoWithAccumulation) {
  SKIP_WITHOUT_MPIRUN();
  expect_exact_resume(kSftYaml + "max_steps: 4\ngrad_accum: 2\n", "dist.zero=2", false);
}

TEST(DistTrain, ResumeOnTheSameRanksIsExactZeroOnePpoWithItsValueModel) {
  SKIP_WITHOUT_MPIRUN();
  expect_exact_resume(
      "objective: ppo\ndata:\n  train: " + test::source_dir() +
          "/examples/data/grpo.jsonl\nmax_tokens: 200\nmax_steps: 4\noptim:\n  lr: 0.0001\n",
      "dist.zero=1", true);
}

TEST(DistTrain, ResumeOnAnotherNumberOfRanksReshardsTheOptimizer) {
  SKIP_WITHOUT_MPIRUN();
  // The same global batch throughout (ranks x grad_accum = 6), the optimizer saved by 2 ranks
  // with ZeRO-2, resumed by 3 with ZeRO-1 and then by one process: the weights are those of a
  // straight run to fp32 summation order (dist_support.h, trained_weights_bound).
  TrainDir run(kSftYaml + "max_steps: 3\nlayer_chunk: 32\n");
  auto r = run.train(2, "straight", "grad_accum=3 dist.zero=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(2, "hop", "grad_accum=3 dist.zero=2 stop_after_steps=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(3, "hop", "grad_accum=2 dist.zero=1 stop_after_steps=1 --resume " + run.out("hop"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(run.out("hop/checkpoint-2/optimizer-rank00002-of-00003.safetensors")));
  r = run.train(0, "hop", "grad_accum=6 --resume " + run.out("hop"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + run.out("hop/checkpoint-2") + ": step 2 of 3"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(run.out("hop/checkpoint-3/optimizer.safetensors")));
  dist_test::expect_trained_weights_close(
      run.out("hop/checkpoint-3/model.safetensors"),
      run.out("straight/checkpoint-3/model.safetensors"),
      {dist_test::read_metrics(run.out("straight/metrics.jsonl"))}, "reshard");
  // Another global batch is allowed on another number of ranks, and said.
  r = run.train(2, "hop", "grad_accum=6 max_steps=4 --resume " + run.out("hop"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: a step now takes 12 micro-batches (2 ranks x grad_accum 6), the "
                          "checkpoint's run took 6"),
            std::string::npos)
      << r.output;
}

TEST(DistTrain, AnErrorOnTheRanksIsOneLineNamingTheRankAndEndsTheRun) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml + "max_steps: 2\n");
  auto r = run.train(2, "out", "dist.zero=4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("streambp: error: rank 0 of 2: "), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("dist.zero must be 0 (replicated optimizer), 1 (sharded AdamW moments), 2 "
                    "(sharded gradients too) or 3"),
      std::string::npos)
      << r.output;
  r = test::run_command(dist_test::mpirun(2, run.dir.path()) + test::streambp_binary() + " train");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("the built-in demo runs on one process"), std::string::npos) << r.output;
  // One process: the key is checked the same way, and the error has no rank.
  r = run.train(0, "out", "dist.zero=4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("streambp: error: override 'dist.zero=4': dist.zero must be 0"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace sbp
