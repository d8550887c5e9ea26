// Hostile inputs of issue 54 (items 7 and 8): transformations whose output can grow without a
// bound, and reward programs whose framing errors depended on timing. Each case runs the real
// `streambp` and expects the suite's clean error (tests/cli/hostile_support.h). Ranks that load
// different weights are tests/dist/dist_agreement_test.cpp's (they need mpirun).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/hostile_support.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using namespace hostile;

// A Sequence of `n` Replace steps, each turning "a" into 256 of them: every step is within its
// own limit (kMaxInsertBytes), the chain grows one character 256^n times.
json replace_chain(const char* list_key, int n) {
  json steps = json::array();
  for (int i = 0; i < n; ++i)
    steps.push_back({{"type", "Replace"},
                     {"pattern", {{"String", "a"}}},
                     {"content", std::string(256, 'a')}});
  return {{"type", "Sequence"}, {list_key, steps}};
}

// Item 7: a chain of Replace steps in a tokenizer.json's normalizer or decoder used to grow "a"
// to gigabytes (1.4 GB and climbing; decoding 10 tokens took 1.2 GB and 8 s). Now the chain
// stops at its bound (16 times its input plus 4 KiB) with an error naming the file and the step.
TEST(HostileBounds, TokenizerGrowth) {
  test::TempDir tmp;
  const std::string chat = src() + "/examples/tiny-chat";
  const json tok = json::parse(test::read_text(chat + "/tokenizer.json"));
  const int32_t a = tok["model"]["vocab"]["a"].get<int32_t>();
  const std::string text = tmp.file("text.jsonl"), ids = tmp.file("ids.jsonl");
  test::write_text(text, "{\"text\": \"a\"}\n");
  test::write_text(ids, "{\"ids\": " + json(std::vector<int32_t>(10, a)).dump() + "}\n");
  struct Bad {
    std::string name;
    std::string key;  // "normalizer" or "decoder"
    int steps;
    std::string args;  // after `--tokenizer DIR`
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"normalizer: 4 chained Replace, text 'a'", "normalizer", 4, "--input " + text,
       "normalizer.normalizers[1] (Replace): grows a text of 1 byte to 65536 bytes"},
      {"normalizer: 64 chained Replace, text 'a'", "normalizer", 64, "--input " + text,
       "normalizer.normalizers[1] (Replace)"},
      {"decoder: 4 chained Replace, 10 tokens", "decoder", 4, "--decode --input " + ids,
       "decoder.decoders[1] (Replace): grows a text of 10 bytes to 67840 bytes"},
      {"decoder: 64 chained Replace, 10 tokens", "decoder", 64, "--decode --input " + ids,
       "decoder.decoders[1] (Replace)"},
  };
  int n = 0;
  for (const Bad& b : bad) {
    const std::string dir = tmp.file("tok" + std::to_string(n++));
    json j = tok;
    j[b.key] = replace_chain(b.key == "normalizer" ? "normalizers" : "decoders", b.steps);
    write_bytes(dir + "/tokenizer.json", j.dump());
    write_bytes(dir + "/tokenizer_config.json", read_bytes(chat + "/tokenizer_config.json"));
    expect_clean_error(
        {b.name, "tokenize --tokenizer " + dir + " " + b.args, {dir + "/tokenizer.json", b.says}},
        tmp.path());
    // Training reads the normalizer for every text: the same error, nothing written.
    if (b.key == "normalizer") {
      const std::string out = tmp.file("out" + std::to_string(n));
      expect_clean_error({b.name + " (train)",
                          "train examples/tiny-chat/sft.yaml tokenizer=" + dir + " output_dir=" + out,
                          {dir + "/tokenizer.json", "normalizer.normalizers[1] (Replace): grows"},
                          {out}},
                         src());
    }
  }
  // One Replace step within the bound still works (Metaspace-like growth is normal).
  const std::string ok = tmp.file("ok");
  json j = tok;
  j["normalizer"] = replace_chain("normalizers", 1);
  write_bytes(ok + "/tokenizer.json", j.dump());
  write_bytes(ok + "/tokenizer_config.json", read_bytes(chat + "/tokenizer_config.json"));
  const auto r = test::run_command(bin() + " tokenize --tokenizer " + ok + " --input " + text);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A framing error found after steps were taken: the progress lines of those steps come first on
// stderr, so the suite's one-line rule is checked on the error itself: exit 1, exactly one
// error line, the last, naming the reward command and the framing rule.
void expect_framing_error(const std::string& name, const std::string& config,
                          const std::string& cwd) {
  SCOPED_TRACE(name);
  const auto r = test::run_command("cd " + cwd + " && { OMP_NUM_THREADS=2 timeout 60 " + bin() +
                                   " train " + config + " 2>&1 >/dev/null; }");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  size_t errors = 0;
  for (size_t at = r.output.find("streambp: error: "); at != std::string::npos;
       at = r.output.find("streambp: error: ", at + 1))
    ++errors;
  EXPECT_EQ(errors, 1u) << r.output;
  const size_t last = r.output.rfind('\n', r.output.size() - 2);
  const std::string line = r.output.substr(last == std::string::npos ? 0 : last + 1);
  EXPECT_EQ(line.rfind("streambp: error: reward command '", 0), 0u) << r.output;
  EXPECT_NE(line.find("(one answer per request"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

// Item 8: a reward program that writes an extra line late (after the check that follows its
// answer), or after the last request, used to be caught in some runs and to train to exit 0 in
// others. Now the program's output is read to its end when the run finishes: an extra line is
// an error whenever it arrives. Each case runs 3 times here (the report's loop runs 20).
TEST(HostileBounds, RewardFraming) {
  if (test::run_command("python3 -c 'import json'").exit_code != 0)
    GTEST_SKIP() << "python3 is not installed (scripts/setup.sh installs it)";
  test::TempDir tmp;
  const std::string script = src() + "/tests/fixtures/reward/late_line_reward.py";
  struct Bad {
    std::string name, argv;
  };
  // 2 steps of 4 prompts x 4 completions: requests 16 and 32 end steps 1 and 2.
  const std::vector<Bad> bad = {
      {"a second line 0.2 s after every answer", "[python3, " + script + ", late]"},
      {"a second line after the last request of step 1", "[python3, " + script + ", after, 16]"},
      {"a second line after the last request of the run", "[python3, " + script + ", after, 32]"},
      {"a line written at end of input", "[python3, " + script + ", at-exit]"},
  };
  for (int run = 0; run < 3; ++run) {
    for (const Bad& b : bad) {
      const std::string name = "r" + std::to_string(run) + "-" + std::to_string(&b - bad.data());
      const std::string config = tmp.file(name + ".yaml");
      test::write_text(config,
                       "model: " + src() + "/examples/tiny-chat/config.json\ntokenizer: " + src() +
                           "/examples/tiny-chat\noutput_dir: " + tmp.file(name + "-out") +
                           "\ndata:\n  train: " + src() +
                           "/examples/tiny-chat/arith_prompts.jsonl\n  eval_fraction: 0\n"
                           "objective: grpo\ngrpo:\n  num_generations: 4\n  prompts_per_step: 4\n"
                           "  max_completion_length: 6\nrewards:\n  - {type: command, command: " +
                           b.argv +
                           "}\nreward_timeout: 20\nmax_tokens: 512\nmax_steps: 2\nsave_every: 0\n"
                           "threads: 1\noptim:\n  lr: 0.01\nschedule:\n  type: constant\n");
      expect_framing_error(b.name + " (run " + std::to_string(run + 1) + ")", config, tmp.path());
    }
  }
}

}  // namespace
}  // namespace sbp
