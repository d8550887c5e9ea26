// Context parallelism in the trainer: `mpirun -np 2|4 streambp train dist.context_parallel=2|4`
// (one context group) and `mpirun -np 4 ... dist.context_parallel=2` (two groups of two that
// split the batch) train the same weights and log the same losses as one process, for SFT,
// DPO, GRPO, PPO, LoRA, a sliding-window model and bf16 (its fp32 master weights): weights within
// the bound that the exactness contract gives two runs summing the same gradients in other
// orders (dist_support.h, trained_weights_bound: the ranks add dK/dV and weight gradients in
// another order than one process, over products of other row counts), every logged statistic
// within 1e-6. Packed data (max_tokens above one example).
//
// Adam's eps is 1e-3 (the library's default is 1e-8): at lr 1e-4 its gain from gradient to
// update, 2 lr / eps, is 0.2, so summation noise in gradients stays below the weights' own
// rounding, and the bound stays far below what a dropped or doubled contribution does (~3e-4 on
// the SFT case). With eps 1e-6 the gain was 200: an element with |g| ~ eps turned fp32
// summation-order noise of a few 1e-9 into weight differences of ~1e-7, and the old bound (twice
// the distance between two exact one-process runs) was a sample of that noise, which cp 4 drew
// past on an AMD Zen 5 (1.467e-6 against 1.379e-6, issue 49).
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
                           "eps: 1e-3\n  weight_decay: 0.1\n";
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
  const bool bf16 = std::string(k.yaml).find("precision: bf16") != std::string::npos;
  const dist_test::TrainedRun policy{want, "grad_norm", 1e-3, bf16};
  const dist_test::TrainedRun value{want, "value_grad_norm", 1e-3, bf16};
  if (std::string(k.name) == "sft") {
    // The bound can fail: one process trained on half of each step's batch lands far outside it.
    r = run.train(0, "half", "grad_accum=1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double half = dist_test::trained_weights_ratio(
        run.out("half/checkpoint-3/" + weights), run.out("one/checkpoint-3/" + weights), policy);
    std::printf("[cp] sft: half of each batch, max|a-b| / bound %.2e\n", half);
    EXPECT_GT(half, 10.0);
  }
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
    const std::string label = std::string(k.name) + " " + l.name;
    const double worst = dist_test::expect_trained_weights_close(ckpt + "/" + weights,
                                                                 ref + "/" + weights, policy, label);
    std::printf("[cp] %s: worst max|a-b| / bound over the weights %.2e (relative %.2e)\n",
                label.c_str(), worst,
                dist_test::worst_rel_err(ckpt + "/" + weights, ref + "/" + weights));
    if (std::string(k.objective) == "ppo") {
      const std::string v = "value_model/model.safetensors";
      dist_test::expect_trained_weights_close(ckpt + "/" + v, ref + "/" + v, value, label);
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
               "head_chunk: 32\nmax_steps: 4\noptim:\n  lr: 0.0001\n  eps: 1e-3\n");
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
  dist_test::expect_trained_weights_close(
      run.out("hop/checkpoint-4/model.safetensors"),
      run.out("straight/checkpoint-4/model.safetensors"),
      {dist_test::read_metrics(run.out("straight/metrics.jsonl"))}, "across layouts");
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
