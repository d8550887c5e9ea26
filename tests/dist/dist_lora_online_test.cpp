// LoRA and online GRPO/PPO under `mpirun -np 2 streambp train` (docs/DISTRIBUTED.md "LoRA and
// online objectives on several ranks"), against one process:
//   - LoRA SFT, DPO and PPO: 2 ranks with micro-batches g equal one process with 2g (the same
//     global batch): adapters and their AdamW moments within the bound that the exactness
//     contract gives two summation orders of the same gradients (dist_support.h), the same
//     losses and statistics; dist.zero 2 does not divide adapters (a note) and gives the same
//     bytes as zero 0; a 2-rank checkpoint resumes on one process;
//   - online GRPO (with LoRA too) and PPO: 2 ranks equal one process step by step (one process
//     resumed from the ranks' checkpoint of the step before): the same samples (the completions
//     log and the reward statistics are identical), weights within that bound; a 2-rank PPO
//     checkpoint taken in the middle of a batch resumes on one process;
//   - a reward program that fails on one rank stops every rank, with a checkpoint;
//   - what is still refused (planning LoRA over ranks) is one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "dist/dist_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_test::TrainDir;
using nlohmann::json;

// The settings of dist_equivalence_test (lr 1e-4, Adam eps 1e-3: see there why), 4 steps.
const std::string kOptim =
    "layer_chunk: 16\nhead_chunk: 32\nmax_steps: 4\noptim:\n  lr: 0.0001\n  eps: 1e-3\n  "
    "weight_decay: 0.1\n";
const std::string kLora =
    "lora:\n  r: 4\n  alpha: 8\n  target_modules: [q_proj, v_proj, down_proj]\n";

std::string data(const std::string& path) {
  return "data:\n  train: " + test::source_dir() + "/examples/" + path + "\n";
}

struct LoraCase {
  const char* objective;
  const char* data;
  const char* yaml;
  int64_t grad_accum;  // per rank; the single process runs twice as many
};

const LoraCase kLoraCases[] = {
    {"sft", "data/sft_messages.jsonl", "max_tokens: 160\n", 2},
    {"dpo", "data/dpo.jsonl", "max_tokens: 256\n", 1},
    // LoRA policy, full value model: dist.zero 2 shards the value model's state only.
    {"ppo", "data/grpo.jsonl", "max_tokens: 200\n", 1},
};

void PrintTo(const LoraCase& c, std::ostream* os) { *os << c.objective; }

class DistLora : public ::testing::TestWithParam<LoraCase> {};

TEST_P(DistLora, TwoRanksEqualOneProcessWithTheSameGlobalBatch) {
  SKIP_WITHOUT_MPIRUN();
  const LoraCase& k = GetParam();
  const dist_test::StartAdapter start(kLora);
  TrainDir run(std::string("objective: ") + k.objective + "\n" + data(k.data) + k.yaml + kLora +
               kOptim);
  auto r = run.train(0, "one", "grad_accum=" + std::to_string(2 * k.grad_accum) + start.arg());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> want = dist_test::read_metrics(run.out("one/metrics.jsonl"));
  bool odd_step = false;
  for (const json& l : want) odd_step |= l["micro_batches"].get<int64_t>() % 2 == 1;
  EXPECT_TRUE(odd_step) << "no step leaves a rank an empty slot";
  const std::string ref = run.out("one/checkpoint-4");
  for (int zero : {0, 2}) {
    const std::string name = "zero" + std::to_string(zero);
    r = run.train(2, name,
                  "grad_accum=" + std::to_string(k.grad_accum) +
                      " dist.zero=" + std::to_string(zero) + start.arg());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("data parallel: 2 ranks, zero 0"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("note: dist.zero 2 does not divide LoRA adapters") != std::string::npos,
              zero == 2)
        << r.output;
    const std::string ckpt = run.out(name + "/checkpoint-4");
    // Rank 0 writes the adapters and their (whole) optimizer state; no shards.
    EXPECT_TRUE(fs::exists(ckpt + "/adapter_config.json"));
    EXPECT_FALSE(fs::exists(ckpt + "/optimizer-rank00000-of-00002.safetensors"));
    const std::string label = std::string(k.objective) + " " + name;
    const double w = dist_test::expect_trained_weights_close(
        ckpt + "/adapter_model.safetensors", ref + "/adapter_model.safetensors", {want}, label);
    const double m = dist_test::expect_trained_weights_close(
        ckpt + "/optimizer.safetensors", ref + "/optimizer.safetensors", {want}, label);
    std::printf("[dist lora] %s: worst max|a-b| / bound: adapters %.2e, moments %.2e\n",
                label.c_str(), w, m);
    if (std::string(k.objective) == "ppo") {
      dist_test::expect_trained_weights_close(ckpt + "/value_model/model.safetensors",
                                              ref + "/value_model/model.safetensors",
                                              {want, "value_grad_norm"}, label);
      EXPECT_EQ(fs::exists(ckpt + "/value_model/optimizer-rank00001-of-00002.safetensors"),
                zero == 2);
    }
    // dist.zero does not change what the adapters do.
    if (zero == 2) {
      EXPECT_TRUE(dist_test::same_bytes(ckpt + "/adapter_model.safetensors",
                                        run.out("zero0/checkpoint-4/adapter_model.safetensors")));
    }
    dist_test::expect_same_metrics(run.out(name + "/metrics.jsonl"), run.out("one/metrics.jsonl"),
                                   name, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Objectives, DistLora, ::testing::ValuesIn(kLoraCases),
                         [](const ::testing::TestParamInfo<LoraCase>& i) {
                           return std::string(i.param.objective);
                         });

TEST(DistLoraResume, ATwoRankCheckpointResumesOnOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  const dist_test::StartAdapter start(kLora);
  TrainDir run("objective: sft\n" + data("data/sft_messages.jsonl") + "max_tokens: 160\n" + kLora +
               kOptim);
  auto r = run.train(2, "straight", "grad_accum=1" + start.arg());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run.train(2, "hop", "grad_accum=1 stop_after_steps=2" + start.arg());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(json::parse(test::read_text(run.out("hop/checkpoint-2/trainer_state.json")))["ranks"],
            2);
  r = run.train(0, "hop", "grad_accum=2 --resume " + run.out("hop") + start.arg());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + run.out("hop/checkpoint-2") + ": step 2 of 4"),
            std::string::npos)
      << r.output;
  // Steps 3 and 4 sum on one process what the straight run summed on two ranks.
  const dist_test::TrainedRun straight{dist_test::read_metrics(run.out("straight/metrics.jsonl"))};
  for (const char* f : {"adapter_model.safetensors", "optimizer.safetensors"})
    dist_test::expect_trained_weights_close(run.out(std::string("hop/checkpoint-4/") + f),
                                            run.out(std::string("straight/checkpoint-4/") + f),
                                            straight, f);
}

// Online: 5 prompts per batch (rank 0 samples 3 groups, rank 1 two; 5 micro-batches of one group
// each, so rank 1 runs an empty slot every step), 4 completions of at most 6 tokens.
std::string online_yaml(const std::string& objective, const std::string& extra = "") {
  return "objective: " + objective + "\n" + data("tiny-chat/arith_prompts.jsonl") + objective +
         ":\n  num_generations: 4\n  prompts_per_step: 5\n  max_completion_length: 6\n" + extra +
         "rewards:\n  - {type: format, pattern: \"[0-9]\", weight: 1.0}\n"
         "  - {type: accuracy, weight: 0.5}\n"
         "max_tokens: 128\nlog_completions_every: 1\n" +
         kOptim;
}

struct OnlineCase {
  const char* name;
  std::string yaml;
  const char* weights;  // the trained tensors' file
  std::string args;     // for both runs
  std::string args2;    // for the 2-rank run
};

// Line `step` (1-based) of a JSONL file.
std::string jsonl_line(const std::string& path, size_t step) {
  std::istringstream in(test::read_text(path));
  std::string line;
  for (size_t i = 0; i < step && std::getline(in, line);) ++i;
  return line;
}

// The 2-rank run against one process, step by step: each step of the reference is one process
// resumed from the 2-rank run's checkpoint of the step before (step 1: from the start), so that
// both sample from the same weights. Then the step's samples (prompts, completions, rewards) are
// the same bytes and its reward statistics the same numbers (equal by construction: the same
// weights, the same per-prompt random streams), and the step's weights are within the one-step
// bound of two summation orders (dist_support.h, trained_weights_bound). A one-process run of
// all the steps would not do: from step 2 on its weights differ from the ranks' by rounding,
// and a sampled token flips wherever a draw falls within that rounding of a boundary between
// two tokens' probabilities (rare, but a property of the BLAS kernel, not of our code).
// `run` (of k.yaml) keeps the runs ("two": the 2-rank run, a checkpoint every step).
void expect_online_equal(const OnlineCase& k, const TrainDir& run_dir) {
  const TrainDir* run = &run_dir;
  auto r = run->train(2, "two", k.args + " " + k.args2 + " save_every=1 keep_last=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> two = dist_test::read_metrics(run->out("two/metrics.jsonl"));
  EXPECT_EQ(two.size(), 4u);
  int sampled = 0;
  for (size_t step = 1; step <= two.size(); ++step) {
    const std::string name = "one" + std::to_string(step), label = std::string(k.name) + " step " +
                                                                   std::to_string(step);
    std::string resume;
    if (step > 1) {
      const std::string from = "/checkpoint-" + std::to_string(step - 1);
      fs::create_directories(run->out(name));
      fs::copy(run->out("two" + from), run->out(name + from), fs::copy_options::recursive);
      resume = " --resume " + run->out(name);
    }
    r = run->train(0, name, k.args + " stop_after_steps=1" + resume);
    ASSERT_EQ(r.exit_code, 0) << label << "\n" << r.output;
    const std::vector<json> one = dist_test::read_metrics(run->out(name + "/metrics.jsonl"));
    ASSERT_EQ(one.size(), 1u) << label;
    const json& a = one[0];
    const json& b = two[step - 1];
    EXPECT_EQ(a["micro_batches"], 5) << label;
    // A step reusing its batch (num_iterations) samples nothing.
    ASSERT_EQ(a.contains("generation/tokens"), b.contains("generation/tokens")) << label;
    if (a.contains("generation/tokens")) {
      ++sampled;
      const std::string logged = jsonl_line(run->out(name + "/completions.jsonl"), 1);
      EXPECT_FALSE(logged.empty()) << label;
      EXPECT_EQ(jsonl_line(run->out("two/completions.jsonl"), static_cast<size_t>(sampled)),
                logged)
          << label;
      for (const char* key : {"reward", "reward_std", "rewards/format/mean",
                              "rewards/accuracy/mean", "generation/tokens",
                              "completions/mean_length"})
        EXPECT_EQ(b[key], a[key]) << label << ": " << key;
    }
    test::TempDir lines;
    test::write_text(lines.file("a.jsonl"), a.dump() + "\n");
    test::write_text(lines.file("b.jsonl"), b.dump() + "\n");
    dist_test::expect_same_metrics(lines.file("b.jsonl"), lines.file("a.jsonl"), label, 2);
    const std::string ckpt = "/checkpoint-" + std::to_string(step) + "/";
    const double w = dist_test::expect_trained_weights_close(
        run->out("two" + ckpt + k.weights), run->out(name + ckpt + k.weights), {one}, label);
    std::printf("[dist online] %s: worst max|a-b| / bound over the weights %.2e\n", label.c_str(),
                w);
  }
  EXPECT_GE(sampled, 2) << k.name << ": samples from trained weights too";
}

void expect_online_equal(const OnlineCase& k) {
  const TrainDir run(k.yaml);
  expect_online_equal(k, run);
}

TEST(DistOnline, GrpoOnTwoRanksSamplesAndTrainsAsOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  expect_online_equal({"grpo", online_yaml("grpo", "  beta: 0.04\n  scale_rewards: batch\n"),
                       "model.safetensors", "", "dist.zero=2"});
}

// Context parallelism: both ranks form one context group (every rank samples every prompt, as
// one process does, and the two share each micro-batch's rows).
TEST(DistOnline, GrpoWithContextParallelismSamplesAndTrainsAsOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  expect_online_equal({"grpo cp2", online_yaml("grpo", "  beta: 0.04\n"), "model.safetensors", "",
                       "dist.context_parallel=2"});
}

// Online PPO with its value model, both ranks one context group (num_iterations 2: the old
// values are scored with the rows split too).
TEST(DistOnline, PpoWithContextParallelismSamplesAndTrainsAsOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  expect_online_equal({"ppo cp2", online_yaml("ppo", "  num_iterations: 2\n"), "model.safetensors",
                       "", "dist.context_parallel=2"});
}

TEST(DistOnline, GrpoWithLoraOnTwoRanksSamplesAndTrainsAsOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  const dist_test::StartAdapter start(kLora);
  expect_online_equal({"grpo+lora", online_yaml("grpo", "  beta: 0.04\n") + kLora,
                       "adapter_model.safetensors", start.arg(), ""});
}

TEST(DistOnline, PpoOverTwoIterationsOnTwoRanksAndResumedOnOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  const std::string yaml = online_yaml("ppo", "  num_iterations: 2\n");
  const TrainDir dir(yaml);
  const TrainDir* run = &dir;
  expect_online_equal({"ppo", yaml, "model.safetensors", "", "dist.zero=1"}, dir);
  if (HasFatalFailure()) return;
  // Step 3 is the first of the second batch's two: its checkpoint stores the batch and the old
  // values the ranks computed (each for the micro-batches it trains), which one process resumes.
  auto r = run->train(2, "hop", "dist.zero=1 stop_after_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json state =
      json::parse(test::read_text(run->out("hop/checkpoint-3/trainer_state.json")));
  ASSERT_TRUE(state.contains("rollouts") && !state["rollouts"].is_null()) << state.dump();
  EXPECT_EQ(state["rollouts"]["samples"].size(), 20u);
  EXPECT_EQ(state["rollouts"]["old_values"].size(), 5u);
  // The 2-rank steps 1-3 are those of the run "two", to the bit (the same program and ranks).
  for (const char* f : {"model.safetensors", "value_model/model.safetensors"})
    EXPECT_TRUE(dist_test::same_bytes(run->out(std::string("hop/checkpoint-3/") + f),
                                      run->out(std::string("two/checkpoint-3/") + f)))
        << f;
  r = run->train(0, "hop", "--resume " + run->out("hop"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // An online step is the batch of prompts on any number of ranks: nothing regrouped to note.
  EXPECT_EQ(r.output.find("note: a step now takes"), std::string::npos) << r.output;
  // Step 4, on one process from the ranks' step 3, against the ranks' step 4: one step of two
  // summation orders (the bound of the step's own metrics).
  const std::vector<json> hop = dist_test::read_metrics(run->out("hop/metrics.jsonl"));
  ASSERT_EQ(hop.size(), 4u);
  const std::vector<json> last{hop.back()};
  dist_test::expect_trained_weights_close(run->out("hop/checkpoint-4/model.safetensors"),
                                          run->out("two/checkpoint-4/model.safetensors"), {last},
                                          "ppo hop");
  dist_test::expect_trained_weights_close(
      run->out("hop/checkpoint-4/value_model/model.safetensors"),
      run->out("two/checkpoint-4/value_model/model.safetensors"), {last, "value_grad_norm"},
      "ppo hop");
}

TEST(DistOnline, ARewardProgramFailingOnOneRankStopsEveryRankWithACheckpoint) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(online_yaml("grpo") + "save_every: 0\n");
  // Each rank starts its own reward program; rank 1's exits at its first request.
  const std::string script = run.out("rank_fails.py");
  test::write_text(script,
                   "import json, os, sys\n"
                   "for line in sys.stdin:\n"
                   "    json.loads(line)\n"
                   "    if os.environ.get('OMPI_COMM_WORLD_RANK') == '1':\n"
                   "        sys.exit(3)\n"
                   "    print(json.dumps({'reward': 0.5}), flush=True)\n");
  const auto r =
      run.train(2, "out", "'rewards=[{type: command, command: [python3, " + script + "]}]'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("exited with status 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped before step 1, saved"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run.out("out/checkpoint-0/model.safetensors"))) << r.output;
}

// `streambp plan` does not model replicated adapters on ranks yet: refused, naming both flags.
TEST(DistLoraPlan, PlanningLoraOverRanksIsStillRefusedClearly) {
  TrainDir run("");
  const auto r = test::run_command(test::streambp_binary() + " plan --model " +
                                   run.out("model.json") + " --lora-r 8 --ranks 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("streambp: error: --lora-r"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--ranks"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sbp
