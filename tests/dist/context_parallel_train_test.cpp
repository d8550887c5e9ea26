// Context parallelism in the trainer: `mpirun -np 2|4 streambp train dist.context_parallel=2|4`
// (one context group) and `mpirun -np 4 ... dist.context_parallel=2` (two groups of two that
// split the batch) train the same weights and log the same losses as one process, for SFT,
// DPO, GRPO, PPO, LoRA, a sliding-window model and bf16 (its fp32 master weights): weights within
// 1e-6 (max |a - b| / max |b| per tensor, the data-parallel tests' bound; the ranks add dK/dV and
// weight gradients in another order than one process) or within twice the distance between two
// exact one-process runs (stream and base), whichever is larger; every logged statistic within
// 1e-6. Packed data (max_tokens above one example).
//
// Why the floor: AdamW's first step moves a weight by lr * g / (|g| + eps), whose slope in g peaks
// at lr / (4 eps) = 25 where |g| ~ eps = 1e-6. An element with a gradient that small turns fp32
// summation-order noise of a few 1e-9 into weight differences of ~1e-7, and one process's own
// exact modes disagree there too: on the DPO case (clang -O1) stream vs base differ by 2.2e-6 at
// layers.0.q_proj[2, 14], stream vs stream with other chunks by up to 1.3e-6, where cp 4 differs
// by 1.0e-6. A dropped or doubled contribution moves every weight by ~lr = 1e-4 (~1e-3
// relative), far above either bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "dist/dist_support.h"

namespace sbp {
namespace {

using dist_test::TrainDir;
using nlohmann::json;

struct Case {
  const char* name;
  const char* objective;
  const char* data;  // under examples/
  const char* yaml;  // extra keys
  const char* model_json = dist_test::kTinyModel;
  const char* weights = "model.safetensors";  // the file compared
};

// Mistral with a window of 8 rows: packed examples of ~70 tokens cross the pieces' boundaries
// (40 rows at cp 2, 20 at cp 4) within their windows.
const char* const kWindowModel =
    R"({"model_type": "mistral", "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "vocab_size": 512, "max_position_embeddings": 1024, "rope_theta": 10000.0,
  "sliding_window": 8, "tie_word_embeddings": false, "torch_dtype": "float32"})";

const Case kCases[] = {
    {"sft", "sft", "data/sft_messages.jsonl", "max_tokens: 160\n"},
    {"dpo", "dpo", "data/dpo.jsonl", "max_tokens: 256\n"},
    {"grpo", "grpo", "data/grpo.jsonl", "max_tokens: 200\ngrpo:\n  beta: 0.04\n"},
    {"ppo", "ppo", "data/grpo.jsonl", "max_tokens: 200\n"},
    {"lora_sft", "sft", "data/sft_messages.jsonl", "max_tokens: 160\n"},
    {"sliding_window_sft", "sft", "data/sft_messages.jsonl", "max_tokens: 160\n", kWindowModel},
    // bf16: with save_dtype f32 (TrainDir's) the checkpoint holds the fp32 master weights, not
    // their bf16 rounding (one flipped rounding would be a 2^-8 step that says nothing about the
    // ranks' sums).
    {"bf16_dpo", "dpo", "data/dpo.jsonl", "max_tokens: 256\nprecision: bf16\n"},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ContextParallelTrain : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallelTrain, RanksSharingRowsEqualOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  const Case& k = GetParam();
  const std::string yaml = std::string("objective: ") + k.objective +
                           "\ndata:\n  train: " + test::source_dir() + "/examples/" + k.data +
                           "\n" + k.yaml +
                           "layer_chunk: 16\nhead_chunk: 32\nmax_steps: 3\noptim:\n  lr: 0.0001\n  "
                           "eps: 1e-6\n  weight_decay: 0.1\n";
  const bool lora = std::string(k.name).rfind("lora", 0) == 0;
  const std::string lora_yaml = "lora:\n  r: 4\n  alpha: 8\n";
  // LoRA starts from trained adapters (dist_support.h StartAdapter says why).
  std::optional<dist_test::StartAdapter> start;
  if (lora) start.emplace(lora_yaml);
  TrainDir run(yaml + (lora ? lora_yaml : ""), k.model_json);
  const std::string from = lora ? start->arg() : "";
  // One process with 2 micro-batches a step; cp 2 alone (1 group, grad_accum 2); dp 2 x cp 2
  // (2 groups, grad_accum 1): the same global batch.
  auto r = run.train(0, "one", "grad_accum=2" + from);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> want = dist_test::read_metrics(run.out("one/metrics.jsonl"));
  ASSERT_EQ(want.size(), 3u);
  const std::string weights = lora ? "adapter_model.safetensors" : k.weights;
  // The floor: the same run in the base mode (no chunks), as exact as stream in another order.
  r = run.train(0, "base", "grad_accum=2 mode=base" + from);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto floor_of = [&](const std::string& file) {
    return dist_test::worst_rel_err(run.out("base/checkpoint-3/" + file),
                                    run.out("one/checkpoint-3/" + file));
  };
  const double floor = floor_of(weights);
  std::printf("[cp] %s base vs stream (the floor): %.2e\n", k.name, floor);
  const double bound = std::max(1e-6, 2.0 * floor);
  struct Layout {
    const char* name;
    int ranks;
    const char* args;
    const char* says;
  };
  for (const Layout& l : {Layout{"cp2", 2, "grad_accum=2 dist.context_parallel=2",
                                 "groups of 2 ranks share each micro-batch's rows, 1 group"},
                          Layout{"cp4", 4, "grad_accum=2 dist.context_parallel=4",
                                 "groups of 4 ranks share each micro-batch's rows, 1 group"},
                          Layout{"dp2cp2", 4, "grad_accum=1 dist.context_parallel=2",
                                 "groups of 2 ranks share each micro-batch's rows, 2 groups"}}) {
    r = run.train(l.ranks, l.name, l.args + from);
    ASSERT_EQ(r.exit_code, 0) << l.name << "\n" << r.output;
    EXPECT_NE(r.output.find(l.says), std::string::npos) << r.output;
    const std::string ckpt = run.out(std::string(l.name) + "/checkpoint-3");
    const std::string ref = run.out("one/checkpoint-3");
    const double worst = dist_test::worst_rel_err(ckpt + "/" + weights, ref + "/" + weights);
    std::printf("[cp] %s %s: worst max|a-b|/max|b| over the weights %.2e\n", k.name, l.name, worst);
    EXPECT_LE(worst, bound) << l.name;
    if (std::string(k.objective) == "ppo") {
      const std::string value = "value_model/model.safetensors";
      EXPECT_LE(dist_test::worst_rel_err(ckpt + "/" + value, ref + "/" + value),
                std::max(1e-6, 2.0 * floor_of(value)))
          << l.name;
    }
    dist_test::expect_same_metrics(run.out(std::string(l.name) + "/metrics.jsonl"),
                                   run.out("one/metrics.jsonl"), std::string(k.name) + " " + l.name,
                                   l.ranks);
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, ContextParallelTrain, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.name);
                         });

// A checkpoint of a dp 2 x cp 2 run (ZeRO-2: optimizer shards over all 4 ranks) resumes on one
// process, and one process's on a cp 4 group: the rows' split leaves nothing in a checkpoint.
TEST(ContextParallelTrainResume, CheckpointsResumeAcrossLayouts) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(std::string("objective: sft\ndata:\n  train: ") + test::source_dir() +
               "/examples/data/sft_messages.jsonl\nmax_tokens: 160\nlayer_chunk: 16\n"
               "head_chunk: 32\nmax_steps: 4\noptim:\n  lr: 0.0001\n  eps: 1e-6\n");
  auto r = run.train(0, "straight", "grad_accum=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(4, "hop", "grad_accum=1 dist.context_parallel=2 dist.zero=2 stop_after_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(0, "hop", "grad_accum=2 stop_after_steps=1 --resume " + run.out("hop"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + run.out("hop/checkpoint-2") + ": step 2 of 4"),
            std::string::npos)
      << r.output;
  r = run.train(4, "hop", "grad_accum=2 dist.context_parallel=4 --resume " + run.out("hop"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + run.out("hop/checkpoint-3") + ": step 3 of 4"),
            std::string::npos)
      << r.output;
  EXPECT_LE(dist_test::worst_rel_err(run.out("hop/checkpoint-4/model.safetensors"),
                                     run.out("straight/checkpoint-4/model.safetensors")),
            1e-6);
}

TEST(ContextParallelTrainConfig, ContextParallelMustDivideTheRanks) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(std::string("objective: sft\ndata:\n  train: ") + test::source_dir() +
               "/examples/data/sft_messages.jsonl\nmax_tokens: 160\nmax_steps: 1\n");
  const auto r = run.train(0, "one", "dist.context_parallel=2 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("dist.context_parallel=2': 2 does not divide the run's 1 rank"),
            std::string::npos)
      << r.output;
  const auto base = run.train(0, "base", "dist.context_parallel=2 mode=base 2>&1");
  EXPECT_NE(base.exit_code, 0);
  EXPECT_NE(base.output.find("runs the stream and checkpoint modes, not base"), std::string::npos)
      << base.output;
}

}  // namespace
}  // namespace sbp
