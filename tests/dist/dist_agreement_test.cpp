// `mpirun` with ranks that disagree on the run (issue 35, class 1): each rank is started with its
// own arguments (MPMD: `mpirun -np 1 A : -np 1 B`), and for every kind of disagreement both
// ranks end with exit 1 within seconds, each printing the same one-line error that names the
// key, before anything is written. Ranks whose configs agree in content (other paths to the same
// bytes) still train.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "cli/hostile_support.h"
#include "dist/dist_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using dist_test::TrainDir;

const std::string kSftYaml = "data:\n  train: " + test::source_dir() +
                             "/examples/tiny-chat/train.jsonl\nmax_tokens: 128\nhead_chunk: "
                             "8\nmax_steps: 2\noptim:\n  lr: 0.0001\n";

// How long a rejected start may take: mpirun's own start and end plus reading a few small files
// (about a second here); generous for a loaded CI machine, far below a hang.
constexpr double kMaxSeconds = 30.0;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

struct TwoRanks {
  test::CommandResult result;
  double seconds = 0.0;
};

// Rank 0 runs `train <config0> output_dir=<out> <args0>`, rank 1 the same with its own.
TwoRanks run_two(const TrainDir& run, const std::string& config0, const std::string& args0,
                 const std::string& config1, const std::string& args1) {
  const std::string out = " output_dir=" + run.out("out") + " ";
  const std::string cmd = dist_test::mpirun(1, run.dir.path()) + test::streambp_binary() +
                          " train " + config0 + out + args0 + " : -np 1 " +
                          test::streambp_binary() + " train " + config1 + out + args1;
  const auto t0 = std::chrono::steady_clock::now();
  TwoRanks r;
  r.result = test::run_command(cmd);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// Both ranks said `message` (which names the key) on one line each, and ended with exit 1,
// quickly, having written nothing.
void expect_disagreement(const TrainDir& run, const TwoRanks& r, const std::string& message,
                         bool fresh = true) {
  EXPECT_EQ(r.result.exit_code, 1) << r.result.output;
  EXPECT_LT(r.seconds, kMaxSeconds) << r.result.output;
  for (int rank : {0, 1}) {
    const std::string line =
        "streambp: error: rank " + std::to_string(rank) + " of 2: " + message + "\n";
    EXPECT_EQ(count(r.result.output, line), 1u) << line << "\n" << r.result.output;
  }
  EXPECT_EQ(count(r.result.output, "ranks disagree on "), 2u) << r.result.output;
  EXPECT_EQ(r.result.output.find("MPI_ABORT"), std::string::npos) << r.result.output;
  if (fresh) {
    EXPECT_FALSE(fs::exists(run.out("out"))) << r.result.output;
  }
  std::printf("  %.2f s: %s\n", r.seconds, message.c_str());
}

// One setting differs between the ranks' command lines.
struct OverrideCase {
  std::string args0, args1, message;
};

TEST(DistAgreement, RanksThatDisagreeOnAKeyEndAtOnceNamingIt) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml);
  const std::string other_out = run.out("elsewhere");
  const std::vector<OverrideCase> cases = {
      {"dist.zero=1", "dist.zero=2", "ranks disagree on dist.zero (rank 0: 1, rank 1: 2)"},
      {"max_steps=2", "max_steps=3", "ranks disagree on max_steps (rank 0: 2, rank 1: 3)"},
      {"optim.lr=0.0001", "optim.lr=0.001",
       "ranks disagree on optim.lr (rank 0: 0.0001, rank 1: 0.001)"},
      {"precision=fp32", "precision=bf16",
       "ranks disagree on precision (rank 0: fp32, rank 1: bf16)"},
      {"grad_accum=1", "grad_accum=2", "ranks disagree on grad_accum (rank 0: 1, rank 1: 2)"},
      {"max_tokens=128", "max_tokens=256",
       "ranks disagree on max_tokens (rank 0: 128, rank 1: 256)"},
      {"seed=1", "seed=2", "ranks disagree on seed (rank 0: 1, rank 1: 2)"},
      {"", "output_dir=" + other_out,
       "ranks disagree on output_dir (rank 0: " + run.out("out") + ", rank 1: " + other_out + ")"},
  };
  for (const OverrideCase& c : cases) {
    SCOPED_TRACE(c.message);
    const TwoRanks r = run_two(run, run.config, c.args0, run.config, c.args1);
    expect_disagreement(run, r, c.message);
    EXPECT_FALSE(fs::exists(other_out));
  }
}

TEST(DistAgreement, RanksWithAnotherModelEndAtOnceNamingIt) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml);
  // The other rank's model is three layers deep (its tensors would not match in the reductions).
  std::string deeper = dist_test::kTinyModel;
  const std::string layers = "\"num_hidden_layers\": 2";
  deeper.replace(deeper.find(layers), layers.size(), "\"num_hidden_layers\": 3");
  test::write_text(run.out("deeper.json"), deeper);
  const TwoRanks r = run_two(run, run.config, "", run.config, "model=" + run.out("deeper.json"));
  ASSERT_EQ(r.result.exit_code, 1) << r.result.output;
  const size_t at = r.result.output.find("ranks disagree on model (rank 0: ");
  ASSERT_NE(at, std::string::npos) << r.result.output;
  // The two files' sizes and digests.
  const std::string line = r.result.output.substr(at, r.result.output.find('\n', at) - at);
  EXPECT_NE(line.find(std::to_string(fs::file_size(run.out("model.json"))) + " bytes, fnv1a64 "),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(std::to_string(deeper.size()) + " bytes, fnv1a64 "), std::string::npos)
      << line;
  expect_disagreement(run, r, line);
}

// Issue 54: model files with the same shapes but other weights used to agree (the safetensors
// header was all that was compared) and train silently, data- and context-parallel. Each tensor's
// bytes are now compared: both ranks end at once naming the file and the first tensor that
// differs. Copies of the same weights elsewhere still train.
TEST(DistAgreement, RanksWithOtherWeightsOfTheSameShapesEndAtOnceNamingTheTensor) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml);
  const std::string m0 = run.out("m0"), m1 = run.out("m1"), copy = run.out("copy-of-m0");
  const auto init = test::run_command(test::streambp_binary() + " init --config " +
                                      run.out("model.json") + " --out " + m0 + " --seed 1");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  fs::copy(m0, copy, fs::copy_options::recursive);
  fs::copy(m0, m1, fs::copy_options::recursive);
  // One element of one tensor changed: same file size, same header.
  const std::string weights = m1 + "/model.safetensors";
  std::string bytes = hostile::read_bytes(weights);
  const hostile::Safetensors st(weights);
  const size_t data_start = bytes.size() - st.data.size();
  const size_t at = data_start + st.header["model.norm.weight"]["data_offsets"][0].get<size_t>();
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  hostile::write_bytes(weights, bytes);
  ASSERT_EQ(fs::file_size(weights), fs::file_size(m0 + "/model.safetensors"));
  for (const std::string& layout : {std::string(""), std::string("dist.context_parallel=2")}) {
    SCOPED_TRACE(layout.empty() ? "data parallel" : layout);
    const TwoRanks r =
        run_two(run, run.config, layout + " model=" + m0, run.config, layout + " model=" + m1);
    ASSERT_EQ(r.result.exit_code, 1) << r.result.output;
    const std::string says = "ranks disagree on model/model.safetensors: model.norm.weight (rank 0: ";
    const size_t m = r.result.output.find(says);
    ASSERT_NE(m, std::string::npos) << r.result.output;
    const std::string line = r.result.output.substr(m, r.result.output.find('\n', m) - m);
    EXPECT_EQ(count(line, " xxh64 "), 2u) << line;
    expect_disagreement(run, r, line);
  }
  const TwoRanks same =
      run_two(run, run.config, "max_steps=1 model=" + m0, run.config, "max_steps=1 model=" + copy);
  ASSERT_EQ(same.result.exit_code, 0) << same.result.output;
  EXPECT_TRUE(fs::exists(run.out("out/checkpoint-1/model.safetensors"))) << same.result.output;
}

TEST(DistAgreement, RanksWithOtherDataEndAtOnceNamingIt) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml);
  // The same path on both ranks is the usual case; here each rank is given its own file, one of
  // which has a conversation changed by one byte (the same size).
  const std::string data = test::read_text(test::source_dir() + "/examples/tiny-chat/train.jsonl");
  std::string changed = data;
  const size_t content = changed.find("\"content\": \"");
  ASSERT_NE(content, std::string::npos);
  const size_t at = content + 12;
  changed[at] = changed[at] == 'x' ? 'y' : 'x';
  test::write_text(run.out("changed.jsonl"), changed);
  const TwoRanks r =
      run_two(run, run.config, "", run.config, "data.train=" + run.out("changed.jsonl"));
  ASSERT_EQ(r.result.exit_code, 1) << r.result.output;
  const size_t m = r.result.output.find("ranks disagree on data.train (rank 0: ");
  ASSERT_NE(m, std::string::npos) << r.result.output;
  const std::string line = r.result.output.substr(m, r.result.output.find('\n', m) - m);
  EXPECT_EQ(count(line, std::to_string(data.size()) + " bytes, fnv1a64 "), 2u) << line;
  expect_disagreement(run, r, line);
}

TEST(DistAgreement, RanksResumingFromOtherCheckpointsEndAtOnceNamingThem) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml);
  auto r = run.train(2, "out", "save_every=1 keep_last=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(run.out("out/checkpoint-1")));
  const TwoRanks two = run_two(run, run.config, "--resume " + run.out("out/checkpoint-1"),
                               run.config, "--resume " + run.out("out"));
  expect_disagreement(run, two,
                      "ranks disagree on --resume (rank 0: directory checkpoint-1, rank 1: "
                      "directory checkpoint-2)",
                      /*fresh=*/false);
  EXPECT_FALSE(fs::exists(run.out("out/checkpoint-3")));
}

TEST(DistAgreement, RanksThatAgreeInContentTrainWhateverTheirPaths) {
  SKIP_WITHOUT_MPIRUN();
  TrainDir run(kSftYaml);
  // Rank 1's config is another file with the same keys but a copy of the data elsewhere, and
  // its own thread count (a property of its machine, not of the run).
  const std::string copy = run.out("copy.jsonl");
  fs::copy_file(test::source_dir() + "/examples/tiny-chat/train.jsonl", copy);
  const std::string config1 = run.out("config1.yaml");
  fs::copy_file(run.config, config1);
  const TwoRanks r = run_two(run, run.config, "max_steps=1", config1,
                             "max_steps=1 data.train=" + copy + " threads=2");
  ASSERT_EQ(r.result.exit_code, 0) << r.result.output;
  EXPECT_TRUE(fs::exists(run.out("out/checkpoint-1/model.safetensors"))) << r.result.output;
}

}  // namespace
}  // namespace sbp
