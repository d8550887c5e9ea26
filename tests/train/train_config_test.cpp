// The YAML config: keys, defaults, overrides, and file:line errors for every mistake.
#include <gtest/gtest.h>

#include "core/error.h"
#include "support/test_support.h"
#include "train/train_config.h"

namespace sbp {
namespace {

std::string write_yaml(const test::TempDir& dir, const std::string& text) {
  const std::string path = dir.file("cfg.yaml");
  test::write_text(path, text);
  return path;
}

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  test::TempDir dir;
  const std::string path = write_yaml(dir, yaml);
  try {
    load_train_config(path, overrides);
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    if (msg.rfind(path, 0) == 0) msg = "cfg.yaml" + msg.substr(path.size());
    return msg;
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

const char* const kMinimal = "model: m\ndata:\n  train: t.jsonl\n";

TEST(TrainConfig, ReadsKeysAndFillsDefaults) {
  test::TempDir dir;
  const std::string path = write_yaml(dir, R"(# a comment
model: models/qwen
data:
  train: train.jsonl
  eval_fraction: 0.1
  chat_template: qwen3
  truncation: skip
optim:
  lr: 3e-4
  betas: [0.9, 0.95]
  weight_decay: 0.1
schedule: {type: cosine, warmup_ratio: 0.05, min_lr_ratio: 0.1}
max_tokens: 2048
grad_accum: 4
mode: recompute+chunked
)");
  const TrainConfig c = load_train_config(path, {"optim.lr=1e-4", "seed=7", "data.shuffle=false"});
  EXPECT_EQ(c.model, "models/qwen");
  EXPECT_EQ(c.tokenizer, "models/qwen");  // defaults to the model
  EXPECT_EQ(c.data_train, "train.jsonl");
  EXPECT_DOUBLE_EQ(c.eval_fraction, 0.1);
  EXPECT_EQ(c.chat_template, ChatTemplateName::qwen3);
  EXPECT_EQ(c.truncation, Truncation::skip);
  EXPECT_DOUBLE_EQ(c.lr, 1e-4);  // the override wins
  EXPECT_DOUBLE_EQ(c.beta2, 0.95);
  EXPECT_EQ(c.schedule, ScheduleKind::cosine);
  EXPECT_EQ(c.max_tokens, 2048);
  EXPECT_EQ(c.max_seq_len, 2048);  // defaults to max_tokens
  EXPECT_EQ(c.grad_accum, 4);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_FALSE(c.shuffle);
  EXPECT_EQ(c.output_dir, "out/cfg");  // out/<config name>
  EXPECT_EQ(c.metrics, "out/cfg/metrics.jsonl");
  EXPECT_EQ(c.where("optim.weight_decay"), path + ":11");
  EXPECT_EQ(c.where("optim.lr"), "override 'optim.lr=1e-4'");
  // The stored form round-trips.
  const TrainConfig back = train_config_from_json(c.to_json(), "state.json", {});
  EXPECT_EQ(back.to_json(), c.to_json());
}

TEST(TrainConfig, UnknownKeysAndBadValuesNameTheLine) {
  EXPECT_EQ(error_of(std::string(kMinimal) + "optim:\n  lrr: 1\n"),
            "cfg.yaml:5: unknown key 'optim.lrr' (known keys under optim: lr, betas, eps, "
            "weight_decay, max_grad_norm)");
  EXPECT_NE(error_of(std::string(kMinimal) + "learning_rate: 1\n")
                .find("cfg.yaml:4: unknown key 'learning_rate' (known keys: model, "),
            std::string::npos);
  EXPECT_EQ(error_of(std::string(kMinimal) + "max_tokens: lots\n"),
            "cfg.yaml:4: max_tokens: expected an integer, got 'lots'");
  EXPECT_EQ(error_of(std::string(kMinimal) + "optim: {betas: [0.9]}\n"),
            "cfg.yaml:4: optim.betas: expected a list [beta1, beta2], got a list");
  EXPECT_EQ(error_of(std::string(kMinimal) + "grad_accum: 0\n"),
            "cfg.yaml:4: grad_accum must be at least 1");
  EXPECT_EQ(error_of(std::string(kMinimal) + "objective: ppo2\n"),
            "cfg.yaml:4: objective must be sft, dpo, grpo, ppo, orpo or kto");
  EXPECT_EQ(error_of(std::string(kMinimal) + "data:\n  truncation: maybe\n").substr(0, 11),
            "cfg.yaml:5:");
  EXPECT_NE(error_of(std::string(kMinimal) + "mode: fast\n").find("cfg.yaml:4: mode: "),
            std::string::npos);
  EXPECT_EQ(error_of("data:\n  train: t.jsonl\n"),
            "cfg.yaml: model is required (a Hugging Face model directory)");
  EXPECT_EQ(error_of("model: m\ndata: [1]\n"),
            "cfg.yaml:2: data must be a mapping of keys (train, eval, eval_fraction, format, "
            "chat_template, date_string, truncation, max_seq_len, shuffle, append_eos, add_bos)");
  EXPECT_NE(error_of("model: m\n  bad: [\n").find("cfg.yaml:"), std::string::npos);
  EXPECT_EQ(
      error_of(kMinimal, {"optim.lrr=1"}),
      "override 'optim.lrr=1': unknown key 'optim.lrr' (known keys under optim: lr, betas, eps, "
      "weight_decay, max_grad_norm)");
  EXPECT_EQ(error_of(kMinimal, {"lr"}), "override 'lr': expected key=value (e.g. optim.lr=1e-4)");
  EXPECT_EQ(error_of(kMinimal, {"optim.lr=-1"}),
            "override 'optim.lr=-1': optim.lr must be positive");
  // Counts are bounded above too, before anything sizes a buffer or multiplies them.
  EXPECT_EQ(error_of(kMinimal, {"max_tokens=1099511627776"}),
            "override 'max_tokens=1099511627776': max_tokens is 1099511627776, outside [2, "
            "2147483648]");
  EXPECT_EQ(error_of(std::string(kMinimal) + "epochs: 4611686018427387904\n"),
            "cfg.yaml:4: epochs is 4611686018427387904, outside [1, 1099511627776]");
  EXPECT_EQ(error_of(kMinimal, {"grad_accum=9999999999"}),
            "override 'grad_accum=9999999999': grad_accum is 9999999999, outside [1, 1048576]");
  EXPECT_EQ(error_of(kMinimal, {"save_every=9007199254740993"}),
            "override 'save_every=9007199254740993': save_every is 9007199254740993, outside [0, "
            "9007199254740992]");
  EXPECT_EQ(error_of(kMinimal, {"layer_chunk=4294967296"}),
            "override 'layer_chunk=4294967296': layer_chunk is 4294967296, outside [0, "
            "2147483648]");
  EXPECT_EQ(error_of("demo:\n  hidden: 100000000\n"),
            "cfg.yaml:2: demo.hidden is 100000000, outside [1, 65536]");
  EXPECT_EQ(error_of(std::string(kMinimal) + "demo:\n  steps: 3\n"),
            "cfg.yaml:1: model cannot be combined with the demo section (the demo trains its own "
            "model on its own task)");
}

TEST(TrainConfig, PpoKeys) {
  test::TempDir dir;
  const TrainConfig c = load_train_config(
      write_yaml(dir,
                 std::string(kMinimal) +
                     "objective: ppo\nppo:\n  value_model: models/value\n  kl_estimator: k3\n"),
      {"ppo.lam=0.9"});
  EXPECT_EQ(c.ppo.value_model, "models/value");
  EXPECT_EQ(c.ppo.kl_estimator, KlEstimator::k3);
  EXPECT_DOUBLE_EQ(c.ppo.lam, 0.9);
  EXPECT_EQ(TrainConfig{}.ppo.kl_estimator, KlEstimator::k1);
  EXPECT_TRUE(TrainConfig{}.ppo.value_model.empty());
  // Each bad value names its own key and line.
  EXPECT_EQ(error_of(std::string(kMinimal) + "ppo:\n  kl_estimator: k2\n"),
            "cfg.yaml:5: ppo.kl_estimator must be k1 or k3");
  EXPECT_EQ(error_of(std::string(kMinimal) + "ppo:\n  gamma: 1.5\n"),
            "cfg.yaml:5: ppo.gamma must be in [0, 1]");
  EXPECT_EQ(error_of(std::string(kMinimal) + "ppo:\n  lam: -1\n"),
            "cfg.yaml:5: ppo.lam must be in [0, 1]");
  EXPECT_EQ(error_of(std::string(kMinimal) + "ppo:\n  value_epsilon: 0\n"),
            "cfg.yaml:5: ppo.value_epsilon must be positive");
  EXPECT_EQ(error_of(std::string(kMinimal) + "ppo:\n  beta: -0.1\n"),
            "cfg.yaml:5: ppo.beta must be >= 0");
  EXPECT_EQ(error_of(kMinimal, {"ppo.vf_coef=-1"}),
            "override 'ppo.vf_coef=-1': ppo.vf_coef must be >= 0");
}

TEST(TrainConfig, DemoSection) {
  test::TempDir dir;
  const TrainConfig c =
      load_train_config(write_yaml(dir, "demo:\n  steps: 12\n  seq_len: 512\n"), {"demo.seed=3"});
  EXPECT_TRUE(c.demo);
  EXPECT_EQ(c.demo_options.steps, 12);
  EXPECT_EQ(c.demo_options.seq_len, 512);
  EXPECT_EQ(c.demo_options.seed, 3u);
  const TrainConfig empty = load_train_config(write_yaml(dir, "demo:\n"), {});
  EXPECT_TRUE(empty.demo);
  EXPECT_EQ(empty.demo_options.steps, DemoOptions{}.steps);
}

TEST(TrainConfig, ExampleConfigsParse) {
  for (const char* name :
       {"demo.yaml", "sft.yaml", "dpo.yaml", "grpo.yaml", "ppo.yaml", "tiny-chat/sft.yaml"}) {
    const std::string path = test::source_dir() + "/examples/" + name;
    EXPECT_NO_THROW(load_train_config(path, {})) << path;
  }
}

}  // namespace
}  // namespace sbp
