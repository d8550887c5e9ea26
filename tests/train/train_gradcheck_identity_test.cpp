// What `gradcheck` verifies is what `train` runs: for every objective, the trainer's first step
// (its own data, models and execution mode) and gradcheck's step (check/gradcheck.h) on the same
// micro-batch and the same weights give bit-identical losses and gradients, the policy's and
// PPO's value model's alike — because both are the one step runner (step/step_runner.h).
#include <gtest/gtest.h>

#include <cstring>

#include "check/gradcheck.h"
#include "support/test_support.h"
#include "train/trainer.h"

namespace sbp {
namespace {

struct Case {
  const char* objective;
  const char* data;  // under examples/data
  const char* yaml;  // extra keys
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.objective; }

bool same_bits(const Tensor& a, const std::vector<float>& b) {
  return a.numel() == static_cast<int64_t>(b.size()) &&
         std::memcmp(download_f32(a).data(), b.data(), b.size() * sizeof(float)) == 0;
}

class TrainGradcheckIdentity : public ::testing::TestWithParam<Case> {};

TEST_P(TrainGradcheckIdentity, OneStepOfEachGivesTheSameBits) {
  const Case& k = GetParam();
  test::TempDir dir;
  test::write_text(dir.file("model.json"), test::kTinyChatModelJson);
  test::write_text(dir.file("config.yaml"),
                   "model: " + dir.file("model.json") + "\ntokenizer: " + test::source_dir() +
                       "/examples/tiny-chat\noutput_dir: " + dir.file("out") +
                       "\nthreads: 1\nobjective: " + k.objective +
                       "\ndata:\n  train: " + test::source_dir() + "/examples/data/" + k.data +
                       "\nlayer_chunk: 16\nhead_chunk: 24\n" + k.yaml);
  const TrainConfig c = load_train_config(dir.file("config.yaml"), {});
  testing::internal::CaptureStdout();
  Trainer trainer(c, "", single_process());
  testing::internal::GetCapturedStdout();
  const StepBatches step = trainer.next_step_batches();
  ASSERT_EQ(step.micro.size(), 1u);
  const StepResult train = trainer.gradients(step);

  ModelSet& m = trainer.models();
  cli::GradcheckOptions opts;
  opts.objective = c.objective_setup();
  const cli::ModeGrads check = cli::gradcheck_step(
      trainer.backend(), m.policy_config(), m.policy_weights(),
      m.has_reference() ? &m.reference_weights() : nullptr,
      m.has_value() ? &m.value_weights() : nullptr, step.micro[0], trainer.exec(), opts);

  EXPECT_TRUE(std::isfinite(train.loss));
  EXPECT_EQ(train.loss, check.result.loss);
  const ParameterSet& g = m.policy().grads();
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i, ++at)
    EXPECT_TRUE(same_bits(g.tensor(i), check.grads[at])) << g.name(i);
  if (m.has_value()) {
    const ParameterSet& vg = m.value().grads();
    for (size_t i = 0; i < vg.size(); ++i, ++at)
      EXPECT_TRUE(same_bits(vg.tensor(i), check.grads[at])) << "value " << vg.name(i);
  }
  EXPECT_EQ(at, check.grads.size());
  for (const auto& [key, value] : train.metrics)
    EXPECT_EQ(check.result.metrics.at(key), value) << key;
}

INSTANTIATE_TEST_SUITE_P(
    Objectives, TrainGradcheckIdentity,
    ::testing::Values(Case{"sft", "sft_messages.jsonl", "max_tokens: 160\n"},
                      Case{"dpo", "dpo.jsonl", "max_tokens: 256\n"},
                      Case{"grpo", "grpo.jsonl", "max_tokens: 200\ngrpo:\n  beta: 0.04\n"},
                      Case{"ppo", "grpo.jsonl", "max_tokens: 200\n"}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.objective); });

}  // namespace
}  // namespace sbp
