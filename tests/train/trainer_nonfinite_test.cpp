// Numbers that are not numbers, through `streambp train`: a step whose loss or gradient norm is
// not finite stops the run with an error naming the step and saves nothing over the good
// checkpoint (on_nonfinite: stop, the default), or is skipped, counted and resumed past
// (on_nonfinite: skip); a resume refuses trainer state and optimizer files that no run of ours
// could have written (counters out of range, update counts that disagree, moments that are
// NaN or negative); config numbers past fp32's range are refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/train_run.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::read_metrics;
using test::TrainRun;

// A learning rate that makes step 1's update finite but huge (|w| ~ 1e30), so that step 2's
// backward overflows: its gradient norm is NaN.
const std::string kExploding = "max_steps: 4\nsave_every: 1\noptim:\n  lr: 1.0e30\n";

json read_json(const std::string& path) { return json::parse(test::read_text(path)); }
void write_json(const std::string& path, const json& j) { test::write_text(path, j.dump(2)); }

TEST(TrainNonFinite, StopsAtTheStepAndKeepsTheGoodCheckpoint) {
  TrainRun run(kExploding);
  const auto r = run.train();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("streambp: error: step 2: not finite (loss "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gradient norm nan); stopped before updating the weights, nothing "
                          "saved after step 1"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(run.out("checkpoint-1/trainer_state.json")));
  EXPECT_FALSE(fs::exists(run.out("checkpoint-2")));
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["step"], 1);
  // The checkpoint it kept resumes (and stops at the same step again).
  const auto again = run.train("--resume " + run.out());
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("step 2: not finite"), std::string::npos) << again.output;
}

TEST(TrainNonFinite, SkipCountsTheStepsAndResumesPastThem) {
  TrainRun run(kExploding + "on_nonfinite: skip\n");
  auto r = run.train();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 2 skipped (on_nonfinite: skip)"), std::string::npos) << r.output;
  const std::vector<json> m = read_metrics(run.out("metrics.jsonl"));
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m[0].contains("skipped_steps"));
  EXPECT_EQ(m[3]["skipped_steps"], 3);
  EXPECT_EQ(read_json(run.out("checkpoint-4/trainer_state.json"))["skipped_steps"], 3);
  // One update was made: the optimizer's count (1) agrees with step 4 minus 3 skipped.
  r = run.train("--resume " + run.out() + " max_steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_json(run.out("checkpoint-6/trainer_state.json"))["skipped_steps"], 5);
}

class TrainResumeState : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto r = run_.train();
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // The resume's error output after `edit` changed checkpoint-2/trainer_state.json.
  std::string resume_after(const std::function<void(json&)>& edit) {
    const std::string path = run_.out("checkpoint-2/trainer_state.json");
    json state = read_json(path);
    const json original = state;
    edit(state);
    write_json(path, state);
    const auto r = run_.train("--resume " + run_.out() + " max_steps=3");
    write_json(path, original);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    return r.output;
  }
  TrainRun run_{"max_steps: 2\n"};
};

TEST_F(TrainResumeState, RefusesCountersOutOfRange) {
  for (const char* field : {"step", "epoch", "micro_batches_done", "tokens_seen"}) {
    const std::string out = resume_after([&](json& s) { s[field] = -1; });
    EXPECT_NE(out.find("trainer_state.json: \"" + std::string(field) + "\" is -1, outside [0, "),
              std::string::npos)
        << out;
  }
  std::string out = resume_after([](json& s) { s["skipped_steps"] = 3; });
  EXPECT_NE(out.find("\"skipped_steps\" is 3, outside [0, 2]"), std::string::npos) << out;
  out = resume_after([](json& s) { s["total_steps"] = 0; });
  EXPECT_NE(out.find("\"total_steps\" is 0, outside [1, "), std::string::npos) << out;
}

TEST_F(TrainResumeState, RefusesAnOptimizerThatMadeADifferentNumberOfUpdates) {
  const std::string out = resume_after([](json& s) { s["step"] = 1; });
  EXPECT_NE(out.find("the optimizer state has made 2 updates, but"), std::string::npos) << out;
  EXPECT_NE(out.find("says 1 (step 1 minus 0 skipped)"), std::string::npos) << out;
}

// The data-order RNG state is replayed from the seed: an edited state (or another run's) would
// silently change the order of the rest of the run.
TEST_F(TrainResumeState, RefusesAnRngStateTheSeedDoesNotGive) {
  std::string out = resume_after([](json& s) {
    s["epoch_rng_state"][0] = s["epoch_rng_state"][0].get<uint64_t>() ^ 1;
  });
  EXPECT_NE(out.find("trainer_state.json: epoch_rng_state is not the data-order state that seed "
                     "42 gives at the start of epoch 0"),
            std::string::npos)
      << out;
  out = resume_after([](json& s) { s["epoch"] = 1; });
  EXPECT_NE(out.find("gives at the start of epoch 1"), std::string::npos) << out;
}

// Overwrites the first element of tensor `name` in a safetensors file with `value`.
void poke_f32(const std::string& path, const std::string& name, float value) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const json h = json::parse(header);
  ASSERT_TRUE(h.contains(name)) << name;
  const uint64_t begin = h[name]["data_offsets"][0].get<uint64_t>();
  f.seekp(static_cast<std::streamoff>(8 + header_len + begin));
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST_F(TrainResumeState, RefusesMomentsThatAreNotFiniteOrNegative) {
  const std::string file = run_.out("checkpoint-2/optimizer.safetensors");
  const std::string pristine = test::read_text(file);
  struct Case {
    const char* tensor;
    float value;
    const char* message;
  };
  for (const Case& c : {Case{"v.model.norm.weight", -1.0f, "must be finite and >= 0"},
                        Case{"v.model.norm.weight", NAN, "must be finite and >= 0"},
                        Case{"m.model.norm.weight", INFINITY, "must be finite)"}}) {
    SCOPED_TRACE(c.tensor);
    poke_f32(file, c.tensor, c.value);
    const auto r = run_.train("--resume " + run_.out() + " max_steps=3");
    test::write_text(file, pristine);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("optimizer.safetensors: tensor '" + std::string(c.tensor) +
                            "' element 0 is "),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
  }
}

TEST(TrainConfigNumbers, RefusesNumbersPastFp32Range) {
  TrainRun run("optim:\n  lr: 1.0e39\n");
  const auto r = run.train();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("optim.lr: expected a number within fp32 range"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(run.out()));
}

}  // namespace
}  // namespace sbp

namespace sbp {
namespace {

// The run's length is counted without packing every epoch when no order changes the packing;
// a shuffled count that would have to pack too many epochs is refused at once, naming the key.
TEST(TrainEpochs, ManyEpochsAreCountedWithoutPackingEachOne) {
  TrainRun run("stop_after_steps: 1\n");
  auto r = run.train("epochs=1000000000 data.shuffle=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json state = read_json(run.out("checkpoint-1/trainer_state.json"));
  // 1e9 epochs of the one-epoch count (every epoch packs the same way in file order).
  const int64_t total = state["total_steps"].get<int64_t>();
  EXPECT_EQ(total % 1000000000, 0) << total;
  EXPECT_GT(total, 0);

  TrainRun shuffled;
  r = shuffled.train("epochs=1000000000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("override 'epochs=1000000000': epochs 1000000000 of "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("set max_steps instead"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(shuffled.out("checkpoint-1")));
}

}  // namespace
}  // namespace sbp
