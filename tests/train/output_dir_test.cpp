// Output directories keep their data: a fresh run refuses a directory that holds a previous run
// (unless overwrite_output_dir), a resume from an older checkpoint refuses to mix with the
// continuation that went past it, debris of interrupted saves and rotations is cleaned, and a
// metrics file that cannot be written (a full disk) stops the run with an error instead of
// losing its lines silently. Each refusal leaves every byte that was there.
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
using test::TrainRun;

// Every file below `dir` with its contents.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      files[fs::relative(e.path(), dir).string()] = test::read_text(e.path().string());
  return files;
}

TEST(OutputDir, AFreshRunRefusesAPreviousRunsDirectory) {
  TrainRun run("max_steps: 2\n");
  ASSERT_EQ(run.train().exit_code, 0);
  const auto before = snapshot(run.out());
  const auto r = run.train("max_steps=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(run.out() + ": output_dir holds a previous run's files (checkpoint-2, " +
                          run.out("metrics.jsonl") + "); resume it with --resume " + run.out()),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("set overwrite_output_dir: true"), std::string::npos) << r.output;
  EXPECT_EQ(snapshot(run.out()), before);
  // Told to overwrite, it replaces them.
  const auto again = run.train("max_steps=1 overwrite_output_dir=true");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(fs::exists(run.out("checkpoint-1")));
  EXPECT_FALSE(fs::exists(run.out("checkpoint-2")));
  EXPECT_EQ(read_metrics(run.out("metrics.jsonl")).size(), 1u);
}

TEST(OutputDir, AResumeFromAnOlderCheckpointRefusesToMixWithTheContinuation) {
  TrainRun run("max_steps: 3\nsave_every: 1\nkeep_last: 0\n");
  ASSERT_EQ(run.train().exit_code, 0);
  const auto before = snapshot(run.out());
  const auto r = run.train("--resume " + run.out("checkpoint-1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("output_dir holds checkpoints newer than checkpoint-1 (checkpoint-2, "
                          "checkpoint-3), from a run that continued past it"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(snapshot(run.out()), before);
  // Resuming from the newest (the directory) is what it suggests, and works.
  auto ok = run.train("--resume " + run.out() + " max_steps=4");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(run.out("checkpoint-1")));  // keep_last 0: history kept
  // With overwrite_output_dir the newer ones go, the resumed-from one stays.
  ok = run.train("--resume " + run.out("checkpoint-1") + " overwrite_output_dir=true");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(run.out("checkpoint-1/trainer_state.json")));
  // checkpoint-1's config has max_steps 3: steps 1..3, each once.
  EXPECT_EQ(read_metrics(run.out("metrics.jsonl")).size(), 3u);
  EXPECT_FALSE(fs::exists(run.out("checkpoint-4")));
}

TEST(OutputDir, AResumeIntoAnotherRunsDirectoryIsRefused) {
  TrainRun a("max_steps: 2\n"), b("max_steps: 1\n");
  ASSERT_EQ(a.train().exit_code, 0);
  ASSERT_EQ(b.train().exit_code, 0);
  const auto before = snapshot(b.out());
  const auto r = a.train("--resume " + a.out() + " max_steps=3 output_dir=" + b.out());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("output_dir holds another run's files (checkpoint-1"), std::string::npos)
      << r.output;
  EXPECT_EQ(snapshot(b.out()), before);
}

// A run continued in a fresh directory: its checkpoints and its metrics go there (the stored
// metrics path was derived from the old output_dir), and the old directory is left as it was.
TEST(OutputDir, AResumeIntoAFreshDirectoryWritesEverythingThere) {
  TrainRun run("max_steps: 2\n");
  ASSERT_EQ(run.train().exit_code, 0);
  const auto before = snapshot(run.out());
  const std::string fresh = run.dir.file("continued");
  const auto r = run.train("--resume " + run.out() + " max_steps=3 output_dir=" + fresh);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(fresh + "/checkpoint-3/trainer_state.json"));
  const auto m = read_metrics(fresh + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0]["step"], 3);
  EXPECT_EQ(snapshot(run.out()), before);
}

TEST(OutputDir, DebrisOfInterruptedSavesAndRotationsIsRemoved) {
  TrainRun run("max_steps: 2\n");
  ASSERT_EQ(run.train().exit_code, 0);
  for (const char* debris : {".staging-checkpoint-3", ".old-checkpoint-1", "checkpoint-7"}) {
    fs::create_directories(run.out(debris));
    test::write_text(run.out(std::string(debris) + "/model.safetensors"), "partial");
  }
  const auto r = run.train("--resume " + run.out() + " max_steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;  // checkpoint-7 has no trainer_state.json: not newer
  EXPECT_FALSE(fs::exists(run.out(".staging-checkpoint-3")));
  EXPECT_FALSE(fs::exists(run.out(".old-checkpoint-1")));
  EXPECT_FALSE(fs::exists(run.out("checkpoint-7")));
  EXPECT_TRUE(fs::exists(run.out("checkpoint-3/trainer_state.json")));
}

TEST(OutputDir, AMetricsFileOnAFullDiskStopsTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TrainRun run("max_steps: 2\nmetrics: /dev/full\n");
  const auto r = run.train();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find("streambp: error: /dev/full: cannot write metrics: No space left on device"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("saved "), std::string::npos) << r.output;  // nothing claimed saved
  EXPECT_FALSE(fs::exists(run.out("checkpoint-2")));
}

}  // namespace
}  // namespace sbp
