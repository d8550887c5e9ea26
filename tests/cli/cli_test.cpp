// End-to-end checks of the `streambp` program on tiny models.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "backend/blas_core_check.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using test::run_command;

std::string bin() { return test::streambp_binary(); }

TEST(Cli, InitWritesAModelThatGradcheckLoads) {
  test::TempDir tmp;
  const std::string dir = tmp.file("model");
  auto r = run_command(bin() + " init --preset tiny-qwen3 --seed 3 --test-init --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/config.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  r = run_command(bin() + " gradcheck --model " + dir +
                  " --seq-len 37 --segments 3 --layer-chunk 7 --head-chunk 5 --mask"
                  " --modes checkpoint,stream,recompute+chunked,stream+full --json " +
                  tmp.file("g.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("g.json")));
  EXPECT_LT(j["max_rel_err"].get<double>(), 1e-5);
  EXPECT_TRUE(j["loss"].contains("stream"));
  EXPECT_TRUE(j["per_param"].contains("model.layers.1.self_attn.k_norm.weight"));
}

TEST(Cli, GradcheckOnPresetsAndConfigFiles) {
  test::TempDir tmp;
  // tiny-mistral: every layer a window of 5, below both segments' lengths.
  for (const char* preset : {"tiny-qwen2", "tiny-llama", "tiny-mistral"}) {
    auto r = run_command(bin() + " gradcheck --model " + preset + " --seq-len 20 --segments 2");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("PASS"), std::string::npos);
  }
}

// The case that used to fail: a T = 8 GRPO batch (four 2-token sequences) has every q/k gradient
// zero in exact arithmetic, computed as rounding noise that OpenBLAS's Haswell kernels make
// differ between modes (max_rel_err 2.3 against the noise itself). Judged against the model's
// gradient scale it passes, and the output says which tensors were judged so; --json carries
// each tensor's base gradient as a fraction of the largest.
TEST(Cli, GradcheckJudgesZeroGradientsAgainstTheModelsScale) {
  test::TempDir tmp;
  const auto r = run_command("OPENBLAS_CORETYPE=Haswell " + bin() +
                             " gradcheck --model tiny-qwen3 --seq-len 8 --objective grpo --json " +
                             tmp.file("g.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of the largest: against 1e-02 of it"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("g.json")));
  EXPECT_LT(j["base_grad_fraction"]["model.layers.0.self_attn.k_proj.weight"].get<double>(), 1e-6);
  double largest = 0.0;  // the fractions are of the largest tensor's: one of them is 1
  for (const auto& [name, f] : j["base_grad_fraction"].items())
    largest = std::max(largest, f.get<double>());
  EXPECT_EQ(largest, 1.0);
}

// A BLAS on generic kernels is named, with the fix, by bench / gradcheck / train (simulated
// with OpenBLAS's own override; a user's OPENBLAS_CORETYPE is kept, not re-executed away), and
// bench's table and JSON name the provider and core. Without the override (the environment as
// CI gives it): a warning only if the environment itself presets a generic core.
TEST(Cli, GenericBlasKernelsAreNamedWithTheFix) {
  test::TempDir tmp;
  const cpu::BlasCoreCheck here = cpu::check_blas_core();
  // The program fixes OpenBLAS's generic core itself (re-executing) unless the environment
  // names one; other providers' generic kernels stay (BLIS on a CPU it does not know).
  const bool generic_here = here.generic && (here.provider != "openblas" ||
                                             std::getenv("OPENBLAS_CORETYPE") != nullptr);
  const auto run_command = [](const std::string& cmd) { return test::run_command_raw(cmd); };
  const bool wide = here.cpu_vectors == "AVX2" || here.cpu_vectors == "AVX-512";
  const std::string bench = " bench --model tiny-qwen3 --seq-len 32 --repeat 1 --warmup 0 --json ";
  auto r = run_command("OPENBLAS_CORETYPE=Prescott " + bin() + bench + tmp.file("g.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const bool openblas = here.provider == "openblas";
  const std::string warning = "runs its generic 'Prescott' kernels on this";
  EXPECT_EQ(r.output.find(warning) != std::string::npos, openblas && wide) << r.output;
  if (openblas && wide) {
    EXPECT_NE(r.output.find("fix: OPENBLAS_CORETYPE="), std::string::npos) << r.output;
    const auto j = nlohmann::json::parse(test::read_text(tmp.file("g.json")));
    EXPECT_EQ(j["blas"]["core"], "Prescott");
    EXPECT_EQ(j["blas"]["generic"], true);
  }
  r = run_command("OPENBLAS_CORETYPE=Prescott " + bin() +
                  " gradcheck --model tiny-qwen3 --seq-len 8");
  EXPECT_EQ(r.output.find(warning) != std::string::npos, openblas && wide) << r.output;
  r = run_command(bin() + bench + tmp.file("d.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("warning:") != std::string::npos, generic_here) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("d.json")));
  EXPECT_EQ(j["blas"]["provider"], here.provider);
  EXPECT_EQ(j["blas"]["generic"], generic_here);
}

// The decision itself, for cores this machine does not have.
TEST(Cli, BlasCoreClassification) {
  using cpu::classify_blas_core;
  EXPECT_TRUE(classify_blas_core("openblas", "Prescott", "AVX-512").generic);
  EXPECT_EQ(classify_blas_core("openblas", "Prescott", "AVX-512").better_core, "SKYLAKEX");
  EXPECT_TRUE(classify_blas_core("openblas", "Sandybridge", "AVX2").generic);
  EXPECT_EQ(classify_blas_core("openblas", "Nehalem", "AVX2").better_core, "HASWELL");
  for (const char* ok : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"})
    EXPECT_FALSE(classify_blas_core("openblas", ok, "AVX-512").generic) << ok;
  EXPECT_FALSE(classify_blas_core("openblas", "Prescott", "SSE").generic);  // nothing wider
  EXPECT_TRUE(classify_blas_core("blis", "generic", "AVX2").generic);
  EXPECT_FALSE(classify_blas_core("blis", "zen3", "AVX2").generic);
  EXPECT_FALSE(classify_blas_core("mkl", "", "AVX-512").generic);
  EXPECT_EQ(cpu::blas_core_warning(classify_blas_core("openblas", "Zen", "AVX2")), "");
}

TEST(Cli, BadInputGivesOneLineErrorAndNonZeroExit) {
  test::TempDir tmp;
  auto r = run_command(bin() + " gradcheck --model no-such-model --seq-len 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no-such-model"), std::string::npos) << r.output;
  test::write_text(tmp.file("config.json"), "{\"model_type\": \"gpt2\", \"hidden_size\": 8}");
  r = run_command(bin() + " gradcheck --model " + tmp.file("config.json") + " --seq-len 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unsupported model_type 'gpt2'"), std::string::npos) << r.output;
  r = run_command(bin() + " gradcheck --model tiny-qwen3 --modes fancy");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown mode 'fancy'"), std::string::npos) << r.output;
}

// A directory or a FIFO named where a file is read: one line naming it, promptly (a FIFO would
// block open() for ever; a directory used to end in "internal error: basic_filebuf").
TEST(Cli, DirectoriesAndFifosAreNotReadAsFiles) {
  test::TempDir tmp;
  const std::string dir = tmp.file("a-dir"), fifo = tmp.file("a-fifo");
  std::filesystem::create_directories(dir);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string chat = test::source_dir() + "/examples/tiny-chat";
  for (const std::string& path : {dir, fifo}) {
    SCOPED_TRACE(path);
    const std::string want = path == dir ? path + ": is a directory, not a regular file"
                                         : path + ": is not a regular file";
    for (const std::string& cmd :
         {bin() + " score --model tiny-qwen3 --input " + path,
          bin() + " train examples/tiny-chat/sft.yaml data.train=" + path +
              " output_dir=" + tmp.file("out"),
          bin() + " train " + path, bin() + " tokenize --tokenizer " + chat + " --input " + path,
          bin() + " plot " + path + " -o " + tmp.file("x.png")}) {
      // From the source directory: the example config's paths are relative to it.
      const auto r = run_command("cd " + test::source_dir() + " && timeout 20 " + cmd);
      EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.output;
      EXPECT_NE(r.output.find(want), std::string::npos) << cmd << "\n" << r.output;
      EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    }
  }
}

// Outputs are written whole or not at all, and a failed write is an error: a full disk behind
// standard output, a --json path that is a directory or in a missing directory.
TEST(Cli, FailedWritesAreErrorsAndLeaveNothingBehind) {
  test::TempDir tmp;
  // 2>&1 first: the error still reaches the captured output while stdout goes to /dev/full (in
  // braces, so that run_command's own 2>&1 applies to the group, not to the program).
  auto r = run_command("{ " + bin() + " plan --model tiny-qwen3 --seq-len 64 2>&1 >/dev/full; }");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("streambp: error: cannot write standard output: No space left on "
                          "device"),
            std::string::npos)
      << r.output;
  const std::string dir = tmp.file("a-dir");
  std::filesystem::create_directories(dir);
  r = run_command(bin() + " plan --model tiny-qwen3 --seq-len 64 --json " + dir);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(dir + ": is a directory, cannot write it"), std::string::npos)
      << r.output;
  const std::string missing = tmp.file("no-such-dir/plan.json");
  r = run_command(bin() + " plan --model tiny-qwen3 --seq-len 64 --json " + missing);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find("--json " + missing + ": " + tmp.file("no-such-dir") + " is not a directory"),
      std::string::npos)
      << r.output;
  r = run_command(bin() + " plan --model tiny-qwen3 --seq-len 64 --json " + tmp.file("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(test::read_text(tmp.file("p.json"))).is_object());
  // Only the result: no temporary sibling is left.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.path()),
                          std::filesystem::directory_iterator()),
            2);
}

// A config.json of a tiny Llama with the fields of `patch` (a JSON object) replaced.
std::string config_with(const std::string& patch) {
  nlohmann::json j = {{"model_type", "llama"},    {"hidden_size", 64},
                      {"intermediate_size", 160}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 8}, {"head_dim", 8},
                      {"vocab_size", 101}};
  j.update(nlohmann::json::parse(patch));
  return j.dump();
}

size_t count_lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(Cli, HostileConfigsFailInOneLineNamingFileAndField) {
  test::TempDir tmp;
  const std::string cfg = tmp.file("config.json"), tokens = tmp.file("tokens.json");
  test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
  struct Hostile {
    const char* patch;
    const char* says;
  };
  for (const Hostile& h :
       {Hostile{R"({"hidden_size": 1099511627776})",
                "field 'hidden_size' is 1099511627776, above the limit"},
        Hostile{R"({"vocab_size": 9223372036854775807})",
                "field 'vocab_size' is 9223372036854775807, above the limit"},
        Hostile{R"({"num_hidden_layers": 4097})", "field 'num_hidden_layers' is 4097, above"},
        // Each within its limit, their product (the query width) is not.
        Hostile{R"({"num_attention_heads": 512, "head_dim": 4096})",
                "num_attention_heads * head_dim (2097152) is above the limit"},
        Hostile{R"({"rope_theta": 0})", "field 'rope_theta' must be a finite number"},
        Hostile{R"({"rms_norm_eps": 10})",
                "field 'rms_norm_eps' must be a finite number in (0, 1)"}}) {
    test::write_text(cfg, config_with(h.patch));
    for (const std::string& cmd : {bin() + " score --model " + cfg + " --input " + tokens,
                                   bin() + " plan --model " + cfg + " --seq-len 64",
                                   bin() + " gradcheck --model " + cfg + " --seq-len 8"}) {
      const auto r = run_command(cmd);
      EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.output;
      EXPECT_EQ(count_lines(r.output), 1u) << cmd << "\n" << r.output;
      EXPECT_NE(r.output.find("streambp: error: " + cfg + ": "), std::string::npos) << cmd << "\n"
                                                                                    << r.output;
      EXPECT_NE(r.output.find(h.says), std::string::npos) << cmd << "\n" << r.output;
    }
  }
  // --layers overrides are bounded like the config's own value, before anything is written.
  const auto r =
      run_command(bin() + " init --preset tiny-qwen3 --layers 5000 --out " + tmp.file("too-deep"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("field 'num_hidden_layers' is 5000, above the limit of 4096"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("too-deep")));
}

// A config inside every limit whose embedding alone is 2^44 fp32 values (64 TiB).
std::string huge_valid_config() {
  return R"({"model_type": "llama", "hidden_size": 1048576, "intermediate_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 8, "head_dim": 8, "vocab_size": 16777216})";
}

TEST(Cli, AValidModelTooLargeForTheMachineIsOutOfMemoryNotACrash) {
  if (test::kAddressSanitizer)
    GTEST_SKIP() << "AddressSanitizer reserves terabytes of shadow memory: no address-space limit";
  test::TempDir tmp;
  const std::string cfg = tmp.file("config.json"), tokens = tmp.file("tokens.json");
  test::write_text(cfg, huge_valid_config());
  test::write_text(tokens, R"({"sequences": [[1, 2, 3, 4]]})");
  // The address space is capped (16 GiB), so the 64 TiB request fails whatever the kernel's
  // overcommit policy: the allocator's null becomes an error naming the category and the bytes.
  // The plain CPU allocator is the subject, also in the suite's STREAMBP_CHECK_MEMORY=1 pass: the
  // checking backend reserves one address-space arena up front, which the cap refuses first.
  const auto r = run_command("ulimit -v 16777216; env -u STREAMBP_CHECK_MEMORY " + bin() +
                             " score --model " + cfg + " --input " + tokens + " --threads 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("out of memory: the allocator could not provide"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(70368744177664 bytes) for 'weights'"), std::string::npos) << r.output;
}

TEST(Cli, PlanOfAValidHugeModelSaysTheWeightsDoNotFit) {
  test::TempDir tmp;
  const std::string cfg = tmp.file("config.json");
  test::write_text(cfg, huge_valid_config());
  const auto r = run_command(bin() + " plan --model " + cfg + " --budget 80GiB");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("of 'weights'"), std::string::npos) << r.output;
}

// Outside bench, --offload is one setting: "checkpoints,residual_grad" offloads both, as
// "checkpoints+residual_grad" does (it was once read as bench's list and silently dropped).
TEST(Cli, PlanOffloadItemsJoinedByCommaOrPlus) {
  auto longest = [](const std::string& offload) {
    const auto r = run_command(bin() + " plan --model qwen3-8b --modes stream --budget 80GiB"
                                       " --offload " + offload);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t row = r.output.find("| stream | ");
    return row == std::string::npos ? int64_t{-1}
                                    : std::stoll(r.output.substr(row + std::strlen("| stream | ")));
  };
  const int64_t plus = longest("checkpoints+residual_grad");
  EXPECT_EQ(longest("checkpoints,residual_grad"), plus);
  EXPECT_GT(plus, longest("checkpoints"));
  EXPECT_GT(longest("checkpoints"), longest("none"));
}

TEST(Cli, BenchWritesTheDocumentedJson) {
  test::TempDir tmp;
  auto r = run_command(bin() +
                       " bench --model tiny-qwen3 --seq-len 64,96 --modes base,checkpoint,stream"
                       " --repeat 1 --json " +
                       tmp.file("b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("b.json")));
  EXPECT_GT(j["sgemm_gflops"].get<double>(), 0.0);
  ASSERT_EQ(j["runs"].size(), 6u);
  for (const auto& run : j["runs"]) {
    for (const char* key : {"mode", "seq_len", "layer_chunk", "head_chunk", "step_seconds_median",
                            "tokens_per_second", "peak_bytes", "activation_peak_bytes", "breakdown",
                            "rss_peak_bytes", "achieved_gflops", "loss"})
      EXPECT_TRUE(run.contains(key)) << key;
    EXPECT_GT(run["activation_peak_bytes"].get<int64_t>(), 0);
  }
  // The same batch and weights: every mode reports the same loss.
  EXPECT_NEAR(j["runs"][0]["loss"].get<double>(), j["runs"][2]["loss"].get<double>(), 1e-5);
}

// bench --profile: every run's JSON has the measured steps' families, whose seconds add up to
// no more than the steps' and whose FLOPs are the step's; the table is printed. (A GPU backend
// is profiled with a synchronisation around each op: OpProfile.SynchronisesAnAsynchronousBackend.)
TEST(Cli, BenchProfileAccountsForTheSteps) {
  test::TempDir tmp;
  auto r = run_command(bin() +
                       " bench --model tiny-qwen3 --seq-len 64 --modes checkpoint,stream"
                       " --layer-chunk 16 --head-chunk 16 --repeat 2 --profile --json " +
                       tmp.file("b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("| other (step - families) |"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("b.json")));
  EXPECT_GT(j["copy_gbs"].get<double>(), 0.0);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) {
    const auto& p = run["profile"];
    EXPECT_EQ(p["steps"].get<int>(), 2);
    double seconds = 0;
    int64_t flops = 0;
    for (const auto& [name, f] : p["families"].items()) {
      seconds += f["seconds"].get<double>();
      flops += f["flops"].get<int64_t>();
    }
    EXPECT_LE(seconds, p["step_seconds_sum"].get<double>());
    EXPECT_EQ(flops, 2 * run["step_flops"].get<int64_t>());
    for (const char* family : {"layer gemm", "LM-head gemm", "attention fwd", "attention bwd"})
      EXPECT_GT(p["families"][family]["calls"].get<int64_t>(), 0) << family;
  }
}

// A model with sliding-window layers: bench reports the attention FLOPs the window skips (the
// planner's count of the same step with every layer full, minus its count with the windows),
// and the backend's own count of the step agrees with the planner's up to the CPU kernels' tile
// padding.
TEST(Cli, BenchReportsTheFlopsTheSlidingWindowSkips) {
  test::TempDir tmp;
  auto r = run_command(bin() +
                       " bench --model tiny-gemma3 --seq-len 64 --modes base,stream"
                       " --layer-chunk 16 --repeat 1 --json " +
                       tmp.file("b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped by the window"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(test::read_text(tmp.file("b.json")));
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) {
    const auto counted = run["step_flops"].get<int64_t>();
    const auto planned = run["planned_flops"].get<int64_t>();
    const auto no_window = run["planned_flops_no_window"].get<int64_t>();
    EXPECT_GT(run["window_skipped_flops"].get<int64_t>(), 0);
    EXPECT_EQ(run["window_skipped_flops"].get<int64_t>(), no_window - planned);
    // tiny-gemma3: window 5 on layer 0 of 2, T = 64 (docs: the CPU counts padded tiles).
    EXPECT_GE(counted, planned);
    EXPECT_LT(static_cast<double>(counted), 1.1 * static_cast<double>(planned));
  }
}

TEST(Cli, DemoTrainsSavesAndReportsMemory) {
  test::TempDir tmp;
  auto r = run_command(bin() +
                       " train --steps 3 --eval-every 3 --seq-len 256 --pairs 8 --queries 16"
                       " --hidden 32 --layer-chunk 64 --head-chunk 32 --out " +
                       tmp.file("demo"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(tmp.file("demo") + "/model.safetensors"));
  EXPECT_NE(r.output.find("checkpoint (planned)"), std::string::npos) << r.output;
  // The planner runs the same code path: its stream peak equals the measured one.
  auto measured = r.output.find("stream (this run, measured)");
  auto planned = r.output.find("stream (planned)");
  ASSERT_NE(measured, std::string::npos);
  ASSERT_NE(planned, std::string::npos);
  auto value = [&](size_t pos) {
    const size_t eol = r.output.find('\n', pos);
    std::string line = r.output.substr(pos, eol - pos);
    std::string v = line.substr(line.find(')') + 1);
    return v.substr(v.find_first_not_of(' '));
  };
  EXPECT_EQ(value(measured), value(planned)) << r.output;
}

}  // namespace
}  // namespace sbp
