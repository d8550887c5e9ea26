// `streambp train CONFIG.yaml` end to end, through the program: a tiny model learns from a sample
// JSONL; 2N steps equal N + resume + N bit for bit; Ctrl-C saves and a resumed run continues
// exactly; a SIGKILLed run resumes from its last checkpoint; malformed input gives a one-line
// file:line error; `streambp plot` draws the metrics; DPO, GRPO and PPO (policy + value model,
// both resumed bit for bit) train on their data.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/pool.h"
#include "model/checkpoint_io.h"
#include "model/value_model_io.h"
#include "support/test_support.h"
#include "train/train_run.h"

extern char** environ;

namespace sbp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_command;

using test::bin;
using test::read_metrics;
using test::src;
using test::TrainRun;

bool same_file(const std::string& a, const std::string& b) {
  return test::read_text(a) == test::read_text(b);
}

// The weights and optimizer state of two checkpoints are the same bytes.
void expect_identical_checkpoints(const std::string& a, const std::string& b) {
  ASSERT_TRUE(fs::exists(a + "/model.safetensors")) << a;
  ASSERT_TRUE(fs::exists(b + "/model.safetensors")) << b;
  EXPECT_TRUE(same_file(a + "/model.safetensors", b + "/model.safetensors")) << a << " vs " << b;
  EXPECT_TRUE(same_file(a + "/optimizer.safetensors", b + "/optimizer.safetensors"))
      << a << " vs " << b;
  const json sa = json::parse(test::read_text(a + "/trainer_state.json"));
  const json sb = json::parse(test::read_text(b + "/trainer_state.json"));
  EXPECT_EQ(sa["step"], sb["step"]);
  EXPECT_EQ(sa["epoch_rng_state"], sb["epoch_rng_state"]);
  EXPECT_EQ(sa["micro_batches_done"], sb["micro_batches_done"]);
}

// A child `streambp train ...` we can signal; output goes to `log`.
pid_t spawn_train(const std::string& args, const std::string& log) {
  const std::string cmd = "exec " + bin() + " train " + args + " > " + log + " 2>&1";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = 0;
  EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char* const*>(argv), environ),
            0);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

template <class Pred>
bool wait_until(Pred pred, double seconds = 120.0) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int64_t metric_lines(const std::string& path) {
  if (!fs::exists(path)) return 0;
  const std::string text = test::read_text(path);
  return static_cast<int64_t>(std::count(text.begin(), text.end(), '\n'));
}

int64_t state_step(const std::string& ckpt) {
  return json::parse(test::read_text(ckpt + "/trainer_state.json"))["step"].get<int64_t>();
}

TEST(TrainCli, TinyModelLearnsAndLeavesHuggingFaceCheckpoints) {
  TrainRun run(
      "max_steps: 40\noptim:\n  lr: 0.01\n  betas: [0.9, 0.95]\nschedule:\n  type: cosine\n"
      "  warmup_steps: 3\neval_every: 10\nsave_every: 10\nkeep_last: 2\n",
      "  eval_fraction: 0.1\n");
  const auto r = run.train();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chat template: qwen3 (from tokenizer_config.json)"), std::string::npos)
      << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 41u);  // the eval before training, then one line per step
  EXPECT_EQ(m[0]["step"], 0);
  const double eval_before = m[0]["eval_loss"].get<double>();
  const double eval_after = m.back()["eval_loss"].get<double>();
  EXPECT_LT(eval_after, 0.6 * eval_before) << "eval loss " << eval_before << " -> " << eval_after;
  const double first = (m[1]["loss"].get<double>() + m[2]["loss"].get<double>()) / 2;
  const double last = (m[39]["loss"].get<double>() + m[40]["loss"].get<double>()) / 2;
  EXPECT_LT(last, 0.6 * first) << "train loss " << first << " -> " << last;
  for (size_t i = 1; i < m.size(); ++i) {
    const json& l = m[i];
    EXPECT_EQ(l["step"].get<int64_t>(), static_cast<int64_t>(i));
    for (const char* key :
         {"loss", "lr", "grad_norm", "tokens", "loss_tokens", "tokens_per_s", "epoch"})
      EXPECT_TRUE(l.contains(key)) << key;
    EXPECT_LE(l["tokens"].get<int64_t>(), 256);
    EXPECT_GT(l["peak_memory_bytes"]["weights"].get<int64_t>(), 0);
    EXPECT_GT(l["peak_memory_bytes"]["total"].get<int64_t>(),
              l["peak_memory_bytes"]["weights"].get<int64_t>());
    EXPECT_EQ(l.contains("eval_loss"), i % 10 == 0);
  }
  // keep_last: 2 leaves the newest two checkpoints, complete Hugging Face directories.
  EXPECT_FALSE(fs::exists(run.out("checkpoint-10")));
  EXPECT_FALSE(fs::exists(run.out("checkpoint-20")));
  for (const char* step : {"checkpoint-30", "checkpoint-40"}) {
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                          "tokenizer_config.json", "trainer_state.json", "optimizer.safetensors"})
      EXPECT_TRUE(fs::exists(run.out(std::string(step) + "/" + f))) << step << "/" << f;
  }
  EXPECT_FALSE(fs::exists(run.out("checkpoint-40/master_weights.safetensors")));  // fp32 export
  const json cfg = json::parse(test::read_text(run.out("checkpoint-40/config.json")));
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  EXPECT_EQ(cfg["vocab_size"], 512);
  // The checkpoint is a model directory the other commands load.
  const auto g = run_command(bin() + " gradcheck --model " + run.out("checkpoint-40") +
                             " --seq-len 12 --modes stream");
  EXPECT_EQ(g.exit_code, 0) << g.output;

  // streambp plot draws the metrics; without gnuplot it says what to install.
  const std::string png = run.dir.file("loss.png");
  auto p = run_command(bin() + " plot " + run.out("metrics.jsonl") + " -o " + png);
  if (fs::exists("/usr/bin/gnuplot")) {
    ASSERT_EQ(p.exit_code, 0) << p.output;
    EXPECT_EQ(test::read_text(png).substr(0, 8), "\x89PNG\r\n\x1a\n");
  }
  p = run_command("PATH=/nonexistent " + bin() + " plot " + run.out("metrics.jsonl") + " -o " +
                  png);
  EXPECT_EQ(p.exit_code, 1);
  EXPECT_NE(p.output.find("gnuplot not found in PATH; install it"), std::string::npos) << p.output;
}

TEST(TrainCli, TwoNStepsEqualNThenResumeThenN) {
  // grad_accum 2 over ~19 micro-batches an epoch: the 12 steps cross an epoch boundary.
  const std::string yaml =
      "max_steps: 12\ngrad_accum: 2\noptim:\n  lr: 0.003\n  weight_decay: 0.1\n"
      "schedule:\n  type: cosine\n  warmup_steps: 2\n";
  TrainRun straight(yaml), split(yaml);
  auto r = straight.train();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = split.train("stop_after_steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stopped after 6 steps"), std::string::npos) << r.output;
  EXPECT_EQ(state_step(split.out("checkpoint-6")), 6);
  r = split.train("--resume " + split.out());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming from " + split.out("checkpoint-6")), std::string::npos)
      << r.output;
  expect_identical_checkpoints(straight.out("checkpoint-12"), split.out("checkpoint-12"));
  // Every step logged once, with the straight run's losses.
  const std::vector<json> a = read_metrics(straight.out("metrics.jsonl"));
  const std::vector<json> b = read_metrics(split.out("metrics.jsonl"));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i]["step"], a[i]["step"]);
    EXPECT_EQ(b[i]["loss"], a[i]["loss"]) << "step " << i + 1;
  }
  EXPECT_GT(a.back()["epoch"].get<double>(), 1.0);

  // Resuming from the checkpoint alone (its stored config) gives the same again.
  test::TempDir again;
  fs::copy(split.out("checkpoint-6"), again.file("checkpoint-6"), fs::copy_options::recursive);
  r = run_command(bin() + " train --resume " + again.file("checkpoint-6") +
                  " output_dir=" + again.file("out") + " metrics=" + again.file("m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_identical_checkpoints(straight.out("checkpoint-12"), again.file("out/checkpoint-12"));
}

TEST(TrainCli, CtrlCSavesACheckpointAndResumesExactly) {
  TrainRun run("max_steps: 100000\nschedule:\n  type: constant\noptim:\n  lr: 0.002\n");
  const std::string log = run.dir.file("log.txt");
  const pid_t pid = spawn_train(run.config, log);
  ASSERT_TRUE(wait_until([&] { return metric_lines(run.out("metrics.jsonl")) >= 3; }))
      << test::read_text(log);
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 130) << test::read_text(log);
  const std::string output = test::read_text(log);
  EXPECT_NE(output.find("stopped by signal 2"), std::string::npos) << output;
  // The checkpoint is the last finished step.
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  const int64_t k = m.back()["step"].get<int64_t>();
  ASSERT_TRUE(fs::exists(run.out("checkpoint-" + std::to_string(k)))) << output;
  EXPECT_EQ(state_step(run.out("checkpoint-" + std::to_string(k))), k);

  auto r = run.train("--resume " + run.out() + " stop_after_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  TrainRun reference("max_steps: 100000\nschedule:\n  type: constant\noptim:\n  lr: 0.002\n");
  r = reference.train("stop_after_steps=" + std::to_string(k + 2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string step = "checkpoint-" + std::to_string(k + 2);
  expect_identical_checkpoints(reference.out(step), run.out(step));
}

TEST(TrainCli, AKilledRunResumesFromItsLastCheckpoint) {
  const std::string yaml =
      "max_steps: 100000\nsave_every: 2\nkeep_last: 2\nschedule:\n  type: constant\n";
  TrainRun run(yaml);
  const std::string log = run.dir.file("log.txt");
  const pid_t pid = spawn_train(run.config, log);
  ASSERT_TRUE(wait_until([&] { return fs::exists(run.out("checkpoint-4")); }))
      << test::read_text(log);
  kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);

  auto r = run.train("--resume " + run.out() + " stop_after_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("resuming from ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  const int64_t end = m.back()["step"].get<int64_t>();
  const int64_t s = end - 3;
  EXPECT_GE(s, 4);
  EXPECT_EQ(s % 2, 0);
  for (size_t i = 0; i < m.size(); ++i)
    EXPECT_EQ(m[i]["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
  for (const auto& e : fs::directory_iterator(run.out()))
    EXPECT_NE(e.path().filename().string().rfind(".staging", 0), 0u) << "stale " << e.path();

  TrainRun reference(yaml);
  r = reference.train("stop_after_steps=" + std::to_string(end));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_identical_checkpoints(reference.out("checkpoint-" + std::to_string(end)),
                               run.out("checkpoint-" + std::to_string(end)));
}

TEST(TrainCli, Bf16ModelsSaveBf16WithFp32MasterWeightsAndResumeExactly) {
  TrainRun straight("max_steps: 4\n"), split("max_steps: 4\n");
  for (TrainRun* r : {&straight, &split}) {
    const auto init = run_command(bin() + " init --config " + r->dir.file("model.json") +
                                  " --dtype bf16 --seed 5 --out " + r->dir.file("bf16"));
    ASSERT_EQ(init.exit_code, 0) << init.output;
  }
  auto r = straight.train("model=" + straight.dir.file("bf16"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("saves BF16 weights"), std::string::npos) << r.output;
  const json cfg = json::parse(test::read_text(straight.out("checkpoint-4/config.json")));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  EXPECT_TRUE(fs::exists(straight.out("checkpoint-4/master_weights.safetensors")));
  r = split.train("model=" + split.dir.file("bf16") + " stop_after_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = split.train("model=" + split.dir.file("bf16") + " --resume " + split.out());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_identical_checkpoints(straight.out("checkpoint-4"), split.out("checkpoint-4"));
  EXPECT_TRUE(same_file(straight.out("checkpoint-4/master_weights.safetensors"),
                        split.out("checkpoint-4/master_weights.safetensors")));
}

// `precision: bf16` (bf16 weights and activations, fp32 master weights and moments): 2N steps
// equal N + resume + N bit for bit, with fp32 gradients and an fp32 export (the master weights
// are the saved model) and with bf16 gradients and a bf16 export (master_weights.safetensors).
TEST(TrainCli, PrecisionBf16ResumesExactly) {
  for (const std::string& extra :
       {std::string("grad_accum: 2\n"), std::string("grad_dtype: bf16\nsave_dtype: bf16\n")}) {
    const std::string yaml = "precision: bf16\nmax_steps: 6\noptim:\n  lr: 0.003\n" + extra;
    TrainRun straight(yaml), split(yaml);
    auto r = straight.train();
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("bf16"), std::string::npos) << r.output;
    r = split.train("stop_after_steps=3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = split.train("--resume " + split.out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_identical_checkpoints(straight.out("checkpoint-6"), split.out("checkpoint-6"));
    const bool bf16_export = extra.find("save_dtype") != std::string::npos;
    EXPECT_EQ(fs::exists(straight.out("checkpoint-6/master_weights.safetensors")), bf16_export)
        << extra;
    if (bf16_export) {
      EXPECT_TRUE(same_file(straight.out("checkpoint-6/master_weights.safetensors"),
                            split.out("checkpoint-6/master_weights.safetensors")));
    }
    const std::vector<json> a = read_metrics(straight.out("metrics.jsonl"));
    const std::vector<json> b = read_metrics(split.out("metrics.jsonl"));
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(b[i]["loss"], a[i]["loss"]) << extra << i;
  }
}

// Runs `streambp train` expecting exit 1 and exactly one line that starts with the error.
std::string one_line_error(const TrainRun& run, const std::string& args = "") {
  const auto r = run.train(args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line:\n" << r.output;
  EXPECT_EQ(out.rfind("streambp: error: ", 0), 0u) << out;
  return out;
}

TEST(TrainCli, MalformedInputGivesOneLineErrorWithFileAndLine) {
  const std::string good =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})";
  struct Case {
    std::string data, expect;
  } cases[] = {
      {good + "\n{\"messages\": [}\n", "data.jsonl:2: not valid JSON"},
      {good + "\n" + good + "\n{\"prompt\": \"x\"}\n", "data.jsonl:3: missing field \"messages\""},
      {good + "\n{\"messages\": [{\"role\": \"narrator\", \"content\": \"x\"}]}\n",
       "data.jsonl:2: messages[0]: role \"narrator\" is not one of system, user, assistant, tool"},
      {"{\"messages\": []}\n", "data.jsonl:1: \"messages\" is empty"},
      {good + "\n{\"messages\": [{\"role\": \"user\", \"content\": \"" + std::string(3000, 'x') +
           "\"}, {\"role\": \"assistant\", \"content\": \"y\"}]}\n",
       "data.jsonl:2: example has "},
  };
  for (const Case& c : cases) {
    TrainRun run;
    test::write_text(run.dir.file("data.jsonl"), c.data);
    const std::string err = one_line_error(run, "data.train=" + run.dir.file("data.jsonl"));
    EXPECT_NE(err.find(c.expect), std::string::npos) << err;
  }
  TrainRun run("optim:\n  lr: 0.001\n  warmup: 3\n");
  EXPECT_NE(one_line_error(run).find("config.yaml:10: unknown key 'optim.warmup'"),
            std::string::npos);
  TrainRun valid;
  EXPECT_NE(one_line_error(valid, "optim.lr=fast")
                .find("override 'optim.lr=fast': optim.lr: expected a number, got 'fast'"),
            std::string::npos);
  TrainRun no_model;
  EXPECT_NE(one_line_error(no_model, "model=" + no_model.dir.file("nothing")).find("nothing"),
            std::string::npos);
  // A tokenizer whose ids the model cannot embed.
  TrainRun small;
  test::write_text(small.dir.file("model.json"),
                   std::string(test::kTinyModel).replace(std::string(test::kTinyModel).find("512"), 3, "300"));
  EXPECT_NE(one_line_error(small).find("the model's vocab_size is 300"), std::string::npos);
}

TEST(TrainCli, DpoStartsAtLog2AndResumesExactly) {
  const std::string yaml = "objective: dpo\nmax_tokens: 512\nmax_steps: 6\noptim:\n  lr: 0.003\n";
  const std::string data = "data.train=" + src() + "/examples/data/dpo.jsonl";
  TrainRun straight(yaml), split(yaml);
  auto r = straight.train(data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("5 preference records -> 5 pairs"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(straight.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 6u);
  // The policy starts as the reference: every pair's z is 0 and the sigmoid loss is log 2.
  EXPECT_NEAR(m[0]["loss"].get<double>(), std::log(2.0), 1e-6);
  EXPECT_LT(m.back()["loss"].get<double>(), m[0]["loss"].get<double>());
  EXPECT_TRUE(m.back().contains("rewards/accuracies"));
  EXPECT_GT(m.back()["rewards/margins"].get<double>(), 0.0);
  // The reference is the starting model again after a resume, not the resumed weights.
  r = split.train(data + " stop_after_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = split.train(data + " --resume " + split.out());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_identical_checkpoints(straight.out("checkpoint-6"), split.out("checkpoint-6"));
}

TEST(TrainCli, GrpoTrainsOnGroupedRollouts) {
  TrainRun run("objective: grpo\nmax_tokens: 512\nmax_steps: 4\ngrpo:\n  beta: 0.04\n");
  auto r = run.train("data.train=" + src() + "/examples/data/grpo.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("12 rollout records -> 3 groups"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 4u);
  EXPECT_TRUE(m[0].contains("kl"));
  EXPECT_NEAR(m[0]["kl"].get<double>(), 0.0, 1e-9);  // policy == reference at the start
  EXPECT_TRUE(std::isfinite(m.back()["loss"].get<double>()));
  // Groups of different sizes cannot share one advantage formula.
  test::write_text(run.dir.file("uneven.jsonl"),
                   R"({"prompt": "a", "completion": " x", "reward": 1})"
                   "\n"
                   R"({"prompt": "a", "completion": " y", "reward": 0})"
                   "\n"
                   R"({"prompt": "b", "completion": " z", "reward": 1})"
                   "\n");
  const std::string err = one_line_error(run, "data.train=" + run.dir.file("uneven.jsonl"));
  EXPECT_NE(
      err.find(
          "uneven.jsonl:3: the prompt first seen here has 1 completion(s), the first prompt 2"),
      std::string::npos)
      << err;
}

// The PPO value model of two checkpoints: the same weight and optimizer bytes (and fp32 master
// weights when the export dtype is not fp32), besides the policy's.
void expect_identical_value_models(const std::string& a, const std::string& b) {
  for (const char* f : {"value_model/config.json", "value_model/model.safetensors",
                        "value_model/optimizer.safetensors"}) {
    ASSERT_TRUE(fs::exists(a + "/" + f)) << a << "/" << f;
    EXPECT_TRUE(same_file(a + "/" + f, b + "/" + f)) << f << ": " << a << " vs " << b;
  }
  const std::string master = "/value_model/master_weights.safetensors";
  EXPECT_EQ(fs::exists(a + master), fs::exists(b + master));
  if (fs::exists(a + master)) {
    EXPECT_TRUE(same_file(a + master, b + master)) << a << " vs " << b;
  }
}

const std::string kPpoYaml = "objective: ppo\noptim:\n  lr: 0.003\n  weight_decay: 0.1\n";

TEST(TrainCli, PpoTrainsAPolicyAndAValueModelOnGroupedRollouts) {
  // One group held out: PPO, like GRPO, has no held-out loss and says so.
  TrainRun run(kPpoYaml + "max_tokens: 512\nmax_steps: 8\n", "  eval_fraction: 0.3\n");
  const auto r = run.train("data.train=" + src() + "/examples/data/grpo.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("12 rollout records -> 3 groups"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("note: ppo has no held-out loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reference model: the starting model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("value model: random weights (seed 43)"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 8u);
  for (const json& l : m) {
    for (const char* key :
         {"loss", "grad_norm", "value_grad_norm", "loss/policy", "loss/value",
          "policy/clipfrac_avg", "policy/approxkl_avg", "policy/entropy_avg", "val/clipfrac_avg",
          "objective/kl", "objective/non_score_reward", "objective/scores", "reward"})
      ASSERT_TRUE(l.contains(key)) << key << " in " << l.dump();
    EXPECT_FALSE(l.contains("eval_loss"));
    // One update per batch of rollouts: the old log-probs are the current policy's, ratio 1.
    EXPECT_NEAR(l["policy/approxkl_avg"].get<double>(), 0.0, 1e-9);
    EXPECT_EQ(l["policy/clipfrac_avg"].get<double>(), 0.0);
    EXPECT_GT(l["grad_norm"].get<double>(), 0.0);
    EXPECT_GT(l["value_grad_norm"].get<double>(), 0.0);
    EXPECT_GT(l["policy/entropy_avg"].get<double>(), 0.0);
    EXPECT_EQ(l["reward"], l["objective/scores"]);
    EXPECT_NEAR(l["objective/non_score_reward"].get<double>(),
                -0.05 * l["objective/kl"].get<double>(), 1e-12);
    // loss = pg_loss + vf_coef * vf_loss (one micro-batch per step: ga = 1)
    EXPECT_NEAR(l["loss"].get<double>(),
                l["loss/policy"].get<double>() + 0.1 * l["loss/value"].get<double>(), 1e-9);
  }
  // The policy starts as the reference model.
  EXPECT_NEAR(m[0]["objective/kl"].get<double>(), 0.0, 1e-9);
  EXPECT_NE(m.back()["objective/kl"].get<double>(), 0.0);
  // The value model learns the returns.
  EXPECT_LT(m.back()["loss/value"].get<double>(), 0.6 * m[0]["loss/value"].get<double>());

  // value_model/ is a Hugging Face sequence-classification directory that loads back.
  const std::string vdir = run.out("checkpoint-8/value_model");
  const json vcfg = json::parse(test::read_text(vdir + "/config.json"));
  EXPECT_EQ(vcfg["architectures"], json::array({"Qwen3ForSequenceClassification"}));
  EXPECT_EQ(vcfg["num_labels"], 1);
  EXPECT_EQ(vcfg["torch_dtype"], "float32");
  EXPECT_FALSE(fs::exists(vdir + "/master_weights.safetensors"));  // fp32 export
  const ModelConfig cfg = load_config(vdir);
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  ParameterSet v = make_value_parameters(cfg, pool, Category::weights, DType::F32, false);
  ASSERT_NO_THROW(load_value_weights(vdir, cfg, v));
  const Tensor& score = v.get("score.weight");
  double ss = 0.0;
  for (float x : download_f32(score)) ss += std::fabs(x);
  EXPECT_GT(ss, 0.0);
  // The policy is an ordinary causal-LM directory the other commands load.
  const auto g = run_command(bin() + " gradcheck --model " + run.out("checkpoint-8") +
                             " --seq-len 12 --modes stream");
  EXPECT_EQ(g.exit_code, 0) << g.output;
}

TEST(TrainCli, PpoTwoNStepsEqualNThenResumeThenN) {
  // max_tokens 200 holds one group: 3 micro-batches an epoch, steps of 2 and 1 under grad_accum 2,
  // so whitening spans micro-batches and the 6 steps cross epochs. bf16 also checks the value
  // model's fp32 master weights.
  for (const char* dtype : {"f32", "bf16"}) {
    const std::string yaml = kPpoYaml +
                             "max_tokens: 200\nmax_steps: 6\ngrad_accum: 2\nsave_dtype: " + dtype +
                             "\nschedule:\n  type: cosine\n  warmup_steps: 1\n";
    const std::string data = "data.train=" + src() + "/examples/data/grpo.jsonl";
    TrainRun straight(yaml), split(yaml);
    auto r = straight.train(data);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = split.train(data + " stop_after_steps=3");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(split.out("checkpoint-3/value_model/model.safetensors")));
    r = split.train(data + " --resume " + split.out());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("value model: " + split.out("checkpoint-3") + "/value_model"),
              std::string::npos)
        << r.output;
    expect_identical_checkpoints(straight.out("checkpoint-6"), split.out("checkpoint-6"));
    expect_identical_value_models(straight.out("checkpoint-6"), split.out("checkpoint-6"));
    EXPECT_EQ(fs::exists(straight.out("checkpoint-6/value_model/master_weights.safetensors")),
              std::string(dtype) == "bf16");
    const std::vector<json> a = read_metrics(straight.out("metrics.jsonl"));
    const std::vector<json> b = read_metrics(split.out("metrics.jsonl"));
    ASSERT_EQ(a.size(), 6u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i]["loss"], a[i]["loss"]) << dtype << " step " << i + 1;
      EXPECT_EQ(b[i]["value_grad_norm"], a[i]["value_grad_norm"]) << dtype << " step " << i + 1;
      EXPECT_EQ(a[i]["micro_batches"], i % 2 == 0 ? 2 : 1);
    }
  }
}

TEST(TrainCli, PpoStartsFromTheConfiguredValueModel) {
  const std::string data = "data.train=" + src() + "/examples/data/grpo.jsonl";
  TrainRun first(kPpoYaml + "max_tokens: 512\nmax_steps: 3\n");
  auto r = first.train(data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A run started from the trained value model sees its values: a lower value loss at step 1
  // than the run that drew its value model from the seed.
  TrainRun second(kPpoYaml + "max_tokens: 512\nmax_steps: 1\nppo:\n  value_model: " +
                  first.out("checkpoint-3/value_model") + "\n");
  r = second.train(data);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("value model: " + first.out("checkpoint-3/value_model")),
            std::string::npos)
      << r.output;
  const double fresh = read_metrics(first.out("metrics.jsonl"))[0]["loss/value"].get<double>();
  const double trained = read_metrics(second.out("metrics.jsonl"))[0]["loss/value"].get<double>();
  EXPECT_LT(trained, fresh);
  // A bad directory, or a causal LM without a value head: one line naming the key.
  std::string err = one_line_error(second, data + " ppo.value_model=" + second.dir.file("nothing"));
  EXPECT_NE(err.find("ppo.value_model: " + second.dir.file("nothing") +
                     " is not a Hugging Face model directory"),
            std::string::npos)
      << err;
  err = one_line_error(second, data + " ppo.value_model=" + first.out("checkpoint-3"));
  EXPECT_NE(err.find("ppo.value_model: "), std::string::npos) << err;
  EXPECT_NE(err.find("'score.weight'"), std::string::npos) << err;
  // Starting from a model directory, the value model takes its trunk and draws a head.
  TrainRun from_dir(kPpoYaml + "max_tokens: 512\nmax_steps: 1\n");
  r = from_dir.train(data + " model=" + first.out("checkpoint-3"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("value model: the starting model's trunk, score head drawn from seed 42"),
            std::string::npos)
      << r.output;
}

TEST(TrainCli, ObjectivesCheckTheirDataFormat) {
  TrainRun run;
  auto r = run.train("objective=dpo data.train=" + src() + "/examples/data/sft_messages.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.output.find("objective dpo trains on preference (prompt, chosen, rejected) records, but"),
      std::string::npos)
      << r.output;
  r = run.train("objective=ppo data.train=" + src() + "/examples/data/dpo.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(
      r.output.find("objective ppo trains on rollout (prompt, completion, reward) records, but"),
      std::string::npos)
      << r.output;
}

TEST(TrainCli, ExampleConfigsRun) {
  test::TempDir tmp;
  const std::string tiny = src() + "/examples/tiny-chat";
  auto r = run_command("cd " + src() + " && " + bin() +
                       " train examples/tiny-chat/sft.yaml max_steps=3 threads=1 "
                       "output_dir=" +
                       tmp.file("tiny"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(tmp.file("tiny/checkpoint-3/model.safetensors")));
  // The real-model SFT config on the tiny model, with each SFT data format.
  for (const char* data : {"sft_messages", "sft_prompt_completion", "sft_text"}) {
    r = run_command("cd " + src() + " && " + bin() + " train examples/sft.yaml model=" + tiny +
                    "/config.json tokenizer=" + tiny +
                    " max_steps=2 threads=1 max_tokens=512 output_dir=" + tmp.file(data) +
                    " data.train=examples/data/" + std::string(data) + ".jsonl");
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
  // The offline-RL configs on the tiny model.
  for (const char* cfg : {"grpo", "ppo"}) {
    r = run_command("cd " + src() + " && " + bin() + " train examples/" + cfg +
                    ".yaml model=" + tiny + "/config.json tokenizer=" + tiny +
                    " max_steps=2 threads=1 max_tokens=512 output_dir=" + tmp.file(cfg));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(tmp.file(std::string(cfg) + "/checkpoint-2/model.safetensors")))
        << r.output;
  }
  EXPECT_TRUE(fs::exists(tmp.file("ppo/checkpoint-2/value_model/model.safetensors")));
  // The online-GRPO learning example, both stages shortened: GRPO starts from the SFT stage.
  r = run_command("cd " + src() + " && " + bin() +
                  " train examples/tiny-chat/arith-sft.yaml max_steps=3 output_dir=" +
                  tmp.file("arith-sft"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command("cd " + src() + " && " + bin() + " train examples/tiny-chat/arith-grpo.yaml model=" +
                  tmp.file("arith-sft/checkpoint-3") + " max_steps=2 output_dir=" +
                  tmp.file("arith-grpo"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(tmp.file("arith-grpo/checkpoint-2/model.safetensors"))) << r.output;
  // The demo as a config (shrunk).
  r = run_command(
      bin() + " train " + src() +
      "/examples/demo.yaml demo.steps=2 demo.seq_len=512 demo.eval_every=1 "
      "demo.eval_sequences=1 demo.layer_chunk=128 demo.head_chunk=128 demo.threads=1 demo.out=" +
      tmp.file("demo"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(tmp.file("demo/model.safetensors"))) << r.output;
}

// ORPO (no reference model) through the trainer: the runnable example's loss and held-out loss
// fall, and TRL's ORPO statistics are logged.
TEST(TrainCli, OrpoExampleLossFalls) {
  test::TempDir tmp;
  const auto r = run_command("cd " + src() + " && " + bin() +
                             " train examples/tiny-chat/orpo.yaml output_dir=" + tmp.file("orpo"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("48 preference records"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(tmp.file("orpo/metrics.jsonl"));
  ASSERT_GT(m.size(), 10u);
  const json& first = m.front().contains("loss") ? m.front() : m[1];
  EXPECT_LT(m.back()["loss"].get<double>(), 0.5 * first["loss"].get<double>());
  for (const char* k : {"nll_loss", "log_odds_ratio", "log_odds_chosen", "rewards/accuracies"})
    EXPECT_TRUE(m.back().contains(k)) << k;
  double eval_first = NAN, eval_last = NAN;
  for (const json& line : m) {
    if (!line.contains("eval_loss")) continue;
    if (std::isnan(eval_first)) eval_first = line["eval_loss"].get<double>();
    eval_last = line["eval_loss"].get<double>();
  }
  EXPECT_LT(eval_last, 0.5 * eval_first);
}

// SimPO (no reference model, a head route added without an engine change) through the trainer:
// the runnable example's loss falls, chosen ends above rejected, and TRL's CPO statistics are
// logged, the NLL as 0 without cpo_alpha.
TEST(TrainCli, SimpoExampleLossFalls) {
  test::TempDir tmp;
  const auto r = run_command("cd " + src() + " && " + bin() +
                             " train examples/tiny-chat/simpo.yaml output_dir=" + tmp.file("simpo"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("48 preference records"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(tmp.file("simpo/metrics.jsonl"));
  ASSERT_GT(m.size(), 10u);
  const json& first = m.front().contains("loss") ? m.front() : m[1];
  EXPECT_LT(m.back()["loss"].get<double>(), 0.6 * first["loss"].get<double>());
  EXPECT_EQ(m.back()["rewards/accuracies"].get<double>(), 1.0);
  EXPECT_EQ(m.back()["nll_loss"].get<double>(), 0.0);
  for (const char* k : {"rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen",
                        "logps/rejected"})
    EXPECT_TRUE(m.back().contains(k)) << k;
}

// KTO through the trainer: labels reach the step, the reference is the starting model (loss 0.5
// at step 1: every log-ratio and the KL estimate are 0), the example's loss falls.
TEST(TrainCli, KtoExampleStartsAtOneHalfAndFalls) {
  test::TempDir tmp;
  const auto r = run_command("cd " + src() + " && " + bin() +
                             " train examples/tiny-chat/kto.yaml output_dir=" + tmp.file("kto"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("96 unpaired_preference records"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(tmp.file("kto/metrics.jsonl"));
  ASSERT_GT(m.size(), 10u);
  EXPECT_NEAR(m.front()["loss"].get<double>(), 0.5, 1e-6);
  EXPECT_NEAR(m.front()["kl"].get<double>(), 0.0, 1e-6);
  EXPECT_LT(m.back()["loss"].get<double>(), 0.45);
  for (const char* k : {"kl", "rewards/chosen", "rewards/rejected", "logps/chosen", "count/chosen"})
    EXPECT_TRUE(m.back().contains(k)) << k;
}

}  // namespace
}  // namespace sbp
