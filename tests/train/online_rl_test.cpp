// Online GRPO/PPO end to end (train/online_rollouts.h): `streambp train` on prompt records samples
// completions with the current weights, scores them with reward functions and trains on them.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/train_run.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::read_metrics;
using test::src;
using test::TrainRun;

std::string prompts() { return "data.train=" + src() + "/examples/tiny-chat/arith_prompts.jsonl"; }

// 4 prompts x 4 completions of at most 6 tokens per batch; the random tiny model's completions
// contain a digit about half the time, which the format reward pays for.
std::string online_yaml(const std::string& objective, const std::string& extra = "") {
  return "objective: " + objective + "\n" + objective +
         ":\n  num_generations: 4\n  prompts_per_step: 4\n  max_completion_length: 6\n" + extra +
         "rewards:\n  - {type: format, pattern: \"[0-9]\", weight: 1.0}\n"
         "  - {type: accuracy, weight: 0.5}\n"
         "max_tokens: 512\noptim:\n  lr: 0.01\nschedule:\n  type: constant\n";
}

TEST(OnlineRl, GrpoLearnsWhatItsRewardPays) {
  TrainRun run(online_yaml("grpo") + "max_steps: 16\nlog_completions_every: 4\n");
  auto r = run.train(prompts());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 16u);
  double first = 0.0, last = 0.0;
  for (size_t i = 0; i < 4; ++i) {
    first += m[i]["rewards/format/mean"].get<double>() / 4.0;
    last += m[m.size() - 1 - i]["rewards/format/mean"].get<double>() / 4.0;
  }
  EXPECT_GT(last, first + 0.2) << "format reward, first 4 steps " << first << ", last 4 " << last;
  for (const json& line : m) {
    for (const char* key : {"reward", "reward_std", "rewards/accuracy/mean", "completions/mean_length",
                            "completions/max_length", "frac_reward_zero_std", "generation/tokens_per_s",
                            "train/tokens_per_s", "entropy"})
      EXPECT_TRUE(line.contains(key)) << key << " in " << line.dump();
    EXPECT_LE(line["completions/max_length"].get<int64_t>(), 6);
    EXPECT_GT(line["peak_memory_bytes"]["kv_cache"].get<int64_t>() +
                  line["peak_memory_bytes"]["total"].get<int64_t>(), 0);
  }
  // Every 4th step logs its first prompts with each completion and its rewards.
  const std::vector<json> logged = read_metrics(run.out("completions.jsonl"));
  ASSERT_EQ(logged.size(), 4u);
  EXPECT_EQ(logged[0]["step"], 4);
  ASSERT_EQ(logged[0]["prompts"].size(), 4u);
  const json& group = logged[0]["prompts"][0];
  EXPECT_NE(group["prompt"].get<std::string>().find("What is"), std::string::npos);
  EXPECT_TRUE(group["fields"].contains("answer"));
  ASSERT_EQ(group["completions"].size(), 4u);
  EXPECT_TRUE(group["completions"][0]["rewards"].contains("format"));
}

TEST(OnlineRl, StopStringsEndCompletions) {
  // Digits stop a completion: the random model writes one in about half of them.
  TrainRun run(online_yaml("grpo", "  stop: [\"0\", \"1\", \"2\", \"3\", \"4\", \"5\", \"6\", "
                                   "\"7\", \"8\", \"9\"]\n") +
               "max_steps: 2\nlog_completions_every: 1\n");
  auto r = run.train(prompts());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int with_digit = 0;
  for (const json& step : read_metrics(run.out("completions.jsonl")))
    for (const json& group : step["prompts"])
      for (const json& c : group["completions"]) {
        const std::string text = c["completion"];
        if (text.find_first_of("0123456789") == std::string::npos) continue;
        ++with_digit;
        EXPECT_FALSE(c["truncated"].get<bool>()) << text;  // it stopped, at most 6 tokens in
      }
  EXPECT_GT(with_digit, 0);
  // A bad value names the key.
  TrainRun bad(online_yaml("grpo", "  stop: [\"\"]\n") + "max_steps: 1\n");
  r = bad.train(prompts());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("grpo.stop"), std::string::npos) << r.output;
}

TEST(OnlineRl, MaskedTruncatedCompletionsTrainOnNothing) {
  // 2 new tokens: nearly every completion of the random model is cut off. With DAPO's overlong
  // filtering a step whose completions were all cut off has no loss tokens: loss 0, and the
  // weights do not move (constant lr, no weight decay); without it a step whose groups' rewards
  // differ moves them.
  const std::string yaml = "objective: grpo\ngrpo:\n  num_generations: 4\n  prompts_per_step: 2\n"
                           "  max_completion_length: 2\n  mask_truncated_completions: MASK\n"
                           "rewards:\n  - {type: format, pattern: \"[a-m]\"}\n"
                           "max_tokens: 512\nmax_steps: 4\noptim:\n  lr: 0.01\n  weight_decay: 0\n"
                           "schedule:\n  type: constant\nsave_every: 1\nkeep_last: 0\n";
  const auto with = [&](const std::string& mask) {
    std::string y = yaml;
    y.replace(y.find("MASK"), 4, mask);
    return y;
  };
  const auto weights = [](const TrainRun& run, size_t step) {
    return test::read_text(run.out("checkpoint-" + std::to_string(step) + "/model.safetensors"));
  };
  TrainRun masked(with("true")), plain(with("false"));
  auto r = masked.train(prompts());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = plain.train(prompts());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> a = read_metrics(masked.out("metrics.jsonl"));
  const std::vector<json> b = read_metrics(plain.out("metrics.jsonl"));
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  int frozen = 0, trained = 0;
  for (size_t i = 1; i < 4; ++i) {  // step i + 1, from checkpoint-i to checkpoint-(i+1)
    if (a[i]["completions/truncated_fraction"].get<double>() == 1.0) {
      ++frozen;
      EXPECT_EQ(a[i]["loss"].get<double>(), 0.0) << "step " << i + 1;
      EXPECT_EQ(weights(masked, i), weights(masked, i + 1)) << "step " << i + 1;
    }
    if (b[i]["frac_reward_zero_std"].get<double>() < 1.0) {
      ++trained;
      EXPECT_NE(weights(plain, i), weights(plain, i + 1)) << "step " << i + 1;
    }
  }
  EXPECT_GT(frozen, 0);
  EXPECT_GT(trained, 0);
}

TEST(OnlineRl, PpoIterationsClipValuesAgainstTheValuesOfSamplingTime) {
  // Two iterations per batch, a large lr and a tiny value clip range: the first iteration's
  // old values are the current ones (nothing clipped); the second's are still those of
  // sampling time while the value model has moved, so some values are clipped. (Old values
  // scored afresh each step would clip nothing, ever.)
  TrainRun run(online_yaml("ppo", "  num_iterations: 2\n  value_epsilon: 0.0001\n") +
               "max_steps: 2\n");
  auto r = run.train(prompts() + " optim.lr=0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["val/clipfrac_avg"].get<double>(), 0.0) << m[0].dump();
  EXPECT_GT(m[1]["val/clipfrac_avg"].get<double>(), 0.0) << m[1].dump();
}

TEST(OnlineRl, ResumeInTheMiddleOfABatchOfRolloutsIsExact) {
  // num_iterations 2: steps 2k+1 and 2k+2 train on one batch; stopping after step 3 leaves the
  // batch half used, so the checkpoint carries it.
  for (const char* objective : {"grpo", "ppo"}) {
    const std::string yaml =
        online_yaml(objective, "  num_iterations: 2\n") + "max_steps: 6\n";
    TrainRun straight(yaml), split(yaml);
    auto r = straight.train(prompts());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = split.train(prompts() + " stop_after_steps=3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json state = json::parse(test::read_text(split.out("checkpoint-3/trainer_state.json")));
    ASSERT_TRUE(state.contains("rollouts")) << objective;
    EXPECT_EQ(state["rollouts"]["uses"], 1);
    r = split.train(prompts() + " --resume " + split.out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(test::read_text(straight.out("checkpoint-6/model.safetensors")),
              test::read_text(split.out("checkpoint-6/model.safetensors")))
        << objective;
    const std::vector<json> a = read_metrics(straight.out("metrics.jsonl"));
    const std::vector<json> b = read_metrics(split.out("metrics.jsonl"));
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << objective << " step " << i + 1;
      // A batch's second step samples nothing.
      EXPECT_EQ(a[i].contains("generation/tokens"), i % 2 == 0) << objective << " step " << i + 1;
    }
    // The second iteration trains against the sampling log-probs: the ratio moved off 1.
    if (std::string(objective) == "grpo") {
      EXPECT_NE(a[1]["loss"], a[0]["loss"]);
    }
  }
}

TEST(OnlineRl, LoraPolicySamplesWithItsAdaptersAndResumesExactly) {
  // Adapters on a frozen base, sampling their own rollouts, with the reference = the base with
  // the adapters off: a resume in the middle of a batch reproduces adapters and losses exactly.
  const std::string yaml = online_yaml("grpo", "  num_iterations: 2\n  beta: 0.04\n") +
                           "max_steps: 6\nlora:\n  r: 4\n  alpha: 8\n  target_modules: all-linear\n";
  TrainRun straight(yaml), split(yaml);
  auto r = straight.train(prompts());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = split.train(prompts() + " stop_after_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = split.train(prompts() + " --resume " + split.out());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::read_text(straight.out("checkpoint-6/adapter_model.safetensors")),
            test::read_text(split.out("checkpoint-6/adapter_model.safetensors")));
  const std::vector<json> a = read_metrics(straight.out("metrics.jsonl"));
  const std::vector<json> b = read_metrics(split.out("metrics.jsonl"));
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
}

TEST(OnlineRl, AFailingRewardProgramStopsTheRunWithACheckpoint) {
  // The program answers the first request, then exits: the first batch's 16 requests fail.
  TrainRun run(online_yaml("grpo") + "max_steps: 4\nsave_every: 0\n");
  const std::string script = src() + "/tests/fixtures/reward/misbehaving_reward.py";
  auto r = run.train(prompts() + " 'rewards=[{type: command, command: [python3, " + script +
                     ", crash]}]'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("stopped before step 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("saved"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(run.out("checkpoint-0/model.safetensors"))) << r.output;
}

TEST(OnlineRl, ConfigsThatCannotWorkFailNamingTheKey) {
  {
    TrainRun run("objective: grpo\n");  // prompt records, no rewards
    const auto r = run.train(prompts());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("rewards:"), std::string::npos) << r.output;
  }
  {
    TrainRun run("rewards:\n  - {type: accuracy}\n");  // SFT data
    const auto r = run.train();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("rewards score sampled completions"), std::string::npos) << r.output;
  }
  {
    TrainRun run(online_yaml("grpo") + "max_steps: 1\n");
    const auto r = run.train(prompts() + " max_tokens=64");  // a group needs 4 x (prompt + 6)
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("cannot hold a group"), std::string::npos) << r.output;
  }
  {
    TrainRun run("rewards:\n  - {type: accuracy, wieght: 2}\n");
    const auto r = run.train();
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("rewards[0]: unknown key 'wieght'"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace sbp
