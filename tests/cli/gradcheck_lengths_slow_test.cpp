// `streambp gradcheck` gives a meaningful verdict at every short length: every objective on every
// tiny preset at T = 4 .. 64 passes (exit 0). Short batches are where a gradient can be zero in
// exact arithmetic (a scored row that attends to one key has a constant softmax, so q/k get
// nothing) and computed as rounding noise: the measure's floor (check/gradcheck.h,
// kNegligibleGradient) judges such a tensor against the model's gradient scale, not against its
// own noise. A mode that loses or doubles a real term still fails: the mode-equality tests
// (tests/engine) and gradcheck's own cases in cli_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"

namespace sbp {
namespace {

class GradcheckLengths : public ::testing::TestWithParam<std::string> {};

TEST_P(GradcheckLengths, EveryObjectivePassesAtEveryShortLength) {
  for (const char* obj : {"sft", "dpo", "grpo", "ppo"}) {
    for (int T : {4, 5, 6, 7, 8, 12, 16, 24, 33, 64}) {
      const auto r =
          test::run_command(test::streambp_binary() + " gradcheck --threads 1 --model " +
                            GetParam() + " --objective " + obj + " --seq-len " + std::to_string(T));
      EXPECT_EQ(r.exit_code, 0) << GetParam() << " " << obj << " T=" << T << "\n" << r.output;
      EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyPresets, GradcheckLengths,
                         ::testing::Values("tiny-qwen3", "tiny-qwen2", "tiny-llama", "tiny-gemma3",
                                           "tiny-mistral"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace sbp
