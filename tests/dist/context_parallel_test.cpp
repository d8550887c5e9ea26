// Context parallelism through the program: `mpirun -np N streambp gradcheck --cp N` splits every
// mode's rows across the N ranks (engine/context_slice.h) and compares the sum of the ranks'
// gradients, and the whole micro-batch's loss, with base (store + full head) run by one process.
// Every objective, packed and masked batches, sliding windows across the slices' boundaries
// (Gemma 3, Mistral: window 5 below the pieces' sizes), LoRA, bf16 and offloaded checkpoints; cp
// 2 and 4. The tolerance is gradcheck's default (1e-4 of max |g_base|; measured errors are
// ~1e-6: the ranks add dK/dV and the weight gradients in another order than one process). A
// missing reduction fails: leaving out the dK/dV reduction gives 0.66, leaving out DPO's
// pre-pass sums 1.46 (measured by hand when this test was written).
#include <gtest/gtest.h>

#include <fstream>

#include "dist/dist_support.h"

namespace sbp {
namespace {

struct Case {
  int ranks;
  const char* args;
};

const Case kCases[] = {
    {2, "--model tiny-qwen3 --seq-len 64 --objective sft"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective dpo"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective orpo"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective kto"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective simpo"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective grpo"},
    {2, "--model tiny-llama --seq-len 64 --objective ppo"},
    {4, "--model tiny-qwen3 --seq-len 96 --objective sft --segments 3 --mask"},
    {4, "--model tiny-qwen3 --seq-len 96 --objective dpo"},
    {4, "--model tiny-qwen3 --seq-len 96 --objective grpo"},
    {2, "--model tiny-gemma3 --seq-len 96 --objective sft --segments 2"},
    {4, "--model tiny-mistral --seq-len 96 --objective sft"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective dpo --lora-r 4"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective ppo --lora-r 4"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective sft --precision bf16"},
    {2, "--model tiny-qwen3 --seq-len 64 --objective grpo --offload checkpoints"},
};

void PrintTo(const Case& c, std::ostream* os) { *os << "np" << c.ranks << " " << c.args; }

class ContextParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ContextParallel, RanksSummedEqualOneProcessBase) {
  SKIP_WITHOUT_MPIRUN();
  const Case& k = GetParam();
  test::TempDir dir;
  const std::string json = dir.file("r.json");
  const std::string cmd = dist_test::mpirun(k.ranks, dir.path()) + test::streambp_binary() +
                          " gradcheck --threads 1 --cp " + std::to_string(k.ranks) + " " + k.args +
                          " --json " + json;
  const test::CommandResult r = test::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  EXPECT_NE(r.output.find("context parallel: " + std::to_string(k.ranks) + " ranks"),
            std::string::npos)
      << r.output;
  const nlohmann::json j = nlohmann::json::parse(test::read_text(json));
  EXPECT_TRUE(j.at("pass").get<bool>()) << r.output;
  // Every mode's loss is the whole micro-batch's, on every rank (the objective's row sums were
  // reduced): equal to base's up to summation order.
  const double base = j.at("loss").at("base").get<double>();
  for (const auto& [mode, loss] : j.at("loss").items())
    EXPECT_NEAR(loss.get<double>(), base, 1e-5 * std::max(1.0, std::abs(base))) << mode;
}

INSTANTIATE_TEST_SUITE_P(Cases, ContextParallel, ::testing::ValuesIn(kCases));

TEST(ContextParallelCli, CpNeedsThatManyRanks) {
  SKIP_WITHOUT_MPIRUN();
  const test::CommandResult r = test::run_command(
      test::streambp_binary() + " gradcheck --model tiny-qwen3 --seq-len 32 --cp 2 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--cp 2: run under mpirun -np 2 (this run has 1 process)"),
            std::string::npos)
      << r.output;
}

TEST(ContextParallelCli, BaseModeCannotSplitRows) {
  SKIP_WITHOUT_MPIRUN();
  test::TempDir dir;
  const test::CommandResult r = test::run_command(
      dist_test::mpirun(2, dir.path()) + test::streambp_binary() +
      " gradcheck --threads 1 --model tiny-qwen3 --seq-len 32 --cp 2 --modes store+chunked 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("context parallelism runs the stream and checkpoint modes"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace sbp
