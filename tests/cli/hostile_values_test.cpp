// Hostile values (issue 54, items 3-5): zero, empty and negative values that used to mean "off"
// or wrap around, error messages that named the wrong budget, key or file, and outputs reached
// through a symlink inside output_dir. Every case ends in one line `streambp: error: ...` naming
// the flag or key (and file) at fault, exit 1, nothing written (hostile_support.h).
//
// One TEST per class, each looping over a table.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/hostile_support.h"
#include "support/test_support.h"

namespace sbp {
namespace {

namespace fs = std::filesystem;
using namespace hostile;  // Case, expect_clean_error, read_bytes, write_bytes

const std::string kChat = "examples/tiny-chat";

// The head of a tiny-chat SFT config with its paths absolute, for YAML files in a temporary
// directory; `extra` adds keys at the top level.
std::string sft_yaml(const std::string& out, const std::string& extra) {
  const std::string chat = src() + "/" + kChat;
  return "model: " + chat + "/config.json\ntokenizer: " + chat + "\noutput_dir: " + out +
         "\ndata:\n  train: " + chat + "/train.jsonl\nmax_steps: 1\n" + extra;
}

// Zero, empty and negative values: refused, naming the flag or key, on the command line, in a
// YAML file and in an override alike.
TEST(HostileValues, OffValues) {
  test::TempDir tmp;
  const std::string out = tmp.file("out"), made = tmp.file("made");
  const std::string prompts = tmp.file("prompts.jsonl");
  test::write_text(prompts, "{\"prompt\": \"What is 1 plus 1?\"}\n");
  const std::string m = " --model tiny-qwen3 ";
  const std::string gen = "generate --model " + src() + "/" + kChat + "/config.json --tokenizer " +
                          src() + "/" + kChat + " --input " + prompts + " ";
  std::vector<Case> cases = {
      {"plan host budget 0",
       "plan" + m + "--budget 1GiB --reserve 0 --offload checkpoints --host-budget 0",
       {"--host-budget", "must be > 0", "omit it"}},
      {"plan budget 0", "plan" + m + "--budget 0 --reserve 0 --seq-len 64", {"--budget", "> 0"}},
      {"plan cp 2 ranks 1", "plan" + m + "--seq-len 64 --cp 2 --ranks 1", {"--cp 2", "--ranks 1"}},
      {"plan host budget empty",
       "plan" + m + "--budget 1GiB --reserve 0 --offload checkpoints --host-budget ''",
       {"--host-budget", "empty"}},
      {"plan json empty", "plan" + m + "--seq-len 64 --json ''", {"--json", "empty"}},
      {"generate empty stop", gen + "--stop ''", {"--stop", "empty"}},
      {"generate empty stop among others", gen + "--stop x --stop ''", {"--stop", "empty"}},
      {"generate empty output", gen + "--output ''", {"--output", "empty"}},
      {"init seed -1",
       "init --preset tiny-qwen3 --seed -1 --out " + made,
       {"--seed", "-1"},
       {made}},
      {"init seed past uint64",
       "init --preset tiny-qwen3 --seed 18446744073709551616 --out " + made,
       {"--seed"},
       {made}},
      {"generate seed -1", gen + "--seed -1", {"--seed", "-1"}},
      {"bench seed -1", "bench" + m + "--seq-len 8 --seed -1", {"--seed", "-1"}},
      {"gradcheck seed -1", "gradcheck" + m + "--seq-len 8 --seed -1", {"--seed", "-1"}},
      {"score seed -1", "score" + m + "--input " + prompts + " --seed -1", {"--seed", "-1"}},
      {"train demo seed -1", "train --seed -1", {"--seed", "-1"}},
  };
  // Overrides of the example config: each names the override and its key.
  const std::string train = "train " + kChat + "/sft.yaml output_dir=" + out + " ";
  for (const auto& [name, kv, key] : std::vector<std::array<std::string, 3>>{
           {"override memory_budget 0", "memory_budget=0 layer_chunk=auto", "memory_budget"},
           // A budget only auto chunks read: with both chunks fixed it would mean nothing.
           {"memory_budget with fixed chunks", "memory_budget=1GiB layer_chunk=64 head_chunk=32",
            "memory_budget"},
           {"host_memory_budget with fixed chunks",
            "offload=checkpoints host_memory_budget=1GiB layer_chunk=64 head_chunk=32",
            "host_memory_budget"},
           {"override host_memory_budget 0", "offload=checkpoints host_memory_budget=0",
            "host_memory_budget"},
           {"override tokenizer empty", "tokenizer=", "tokenizer"},
           {"override metrics empty", "metrics=''", "metrics"},
           {"override offload empty", "offload=''", "offload"},
           {"override demo.seed -1", "demo.seed=-1", "demo.seed"},
       })
    cases.push_back({name, train + kv, {"override '", key}, {out}});
  for (const Case& c : cases) expect_clean_error(c, src());

  // Whole YAML files: each names the file, its line and the key.
  for (const auto& [name, extra, key] : std::vector<std::array<std::string, 3>>{
           {"yaml host_memory_budget 0", "offload: checkpoints\nhost_memory_budget: 0\n",
            "host_memory_budget"},
           {"yaml memory_budget 0", "memory_budget: 0\n", "memory_budget"},
           {"yaml metrics empty", "metrics: ''\n", "metrics"},
           {"yaml data.eval empty", "data:\n  eval: ''\n", "data.eval"},
       }) {
    const std::string file = tmp.file(key + ".yaml");
    test::write_text(file, sft_yaml(out, extra));
    expect_clean_error({name, "train " + file, {file + ":", key}, {out}}, tmp.path());
  }
  // An empty output_dir or tokenizer: the head's own key given empty.
  for (const std::string key : {"output_dir", "tokenizer"}) {
    std::string text = sft_yaml(out, "");
    const size_t at = text.find(key + ": ");
    text = text.substr(0, at) + key + ": ''" + text.substr(text.find('\n', at));
    const std::string file = tmp.file(key + "-empty.yaml");
    test::write_text(file, text);
    expect_clean_error({"yaml " + key + " empty", "train " + file, {file + ":", key, "empty"}},
                       tmp.path());
    EXPECT_FALSE(fs::exists(tmp.path() + "/out")) << "the default output_dir was created";
  }
}

// Messages that name the budget, key, file and line actually at fault.
TEST(HostileValues, Messages) {
  test::TempDir tmp;
  const std::string out = tmp.file("out");
  const std::string train = "train " + kChat + "/sft.yaml output_dir=" + out + " ";
  // A prompt file whose first line does not parse (online GRPO, config.json for random weights).
  const std::string bad_first = tmp.file("prompts.jsonl");
  test::write_text(bad_first, "{\"prompt\": \"What is 1 plus 1?\", \"answer\": \n" +
                                  read_bytes(src() + "/" + kChat + "/arith_prompts.jsonl"));
  const std::string a_file = tmp.file("a-file");
  test::write_text(a_file, "not a directory\n");
  const std::vector<Case> cases = {
      {"plan host budget too small (search)",
       "plan --model tiny-qwen3 --budget 1GiB --reserve 0 --offload checkpoints --host-budget 1",
       {"--host-budget: the usable host budget of 1 B", "offloads", "fits the usable --budget"}},
      {"train host budget too small",
       train + "offload=checkpoints memory_budget=1GiB host_memory_budget=1 layer_chunk=auto",
       {"host_memory_budget=1", "more than the 1 B host_memory_budget", "fits memory_budget"},
       {out},
       true},  // planned after the data is loaded (and summarised on stdout)
      {"plan offload none among others",
       "plan --model tiny-qwen3 --seq-len 64 --offload none,checkpoints",
       {"--offload", "'none' cannot be combined"}},
      {"train offload none among others",
       train + "offload=none+checkpoints",
       {"override 'offload=none+checkpoints'", "'none' cannot be combined"},
       {out}},
      {"gradcheck offload optimizer",
       "gradcheck --model tiny-qwen3 --seq-len 16 --offload optimizer",
       {"--offload: 'optimizer': this command runs no optimizer"}},
      {"plan offload optimizer without one",
       "plan --model tiny-qwen3 --seq-len 64 --optimizer none --offload optimizer",
       {"--offload optimizer: there is no optimizer state to offload", "--optimizer adamw"}},
      {"bench offload optimizer without one",
       "bench --model tiny-qwen3 --seq-len 16 --offload none,optimizer",
       {"--offload optimizer: there is no optimizer to offload", "--optimizer adamw"}},
      {"grpo prompt file's first line",
       "train " + kChat + "/arith-grpo.yaml model=" + kChat + "/config.json output_dir=" + out +
           " data.train=" + bad_first,
       {bad_first + ":1", "JSON"},
       {out}},
      {"output_dir a file",
       train + "output_dir=" + a_file,
       {"output_dir " + a_file + " is not a directory"}},
      {"output_dir under a file",
       train + "output_dir=" + a_file + "/run",
       {"output_dir " + a_file + "/run is not a directory", a_file + " is not one"}},
  };
  for (const Case& c : cases) expect_clean_error(c, src());
  EXPECT_EQ(read_bytes(a_file), "not a directory\n");
}

// Outputs inside output_dir reached through a symlink: refused, with or without
// overwrite_output_dir, naming the key and the link; the file the link leads to is unchanged.
TEST(HostileValues, OutputsThroughLinks) {
  test::TempDir tmp;
  const std::string victim = tmp.file("elsewhere/precious.txt");
  const std::string bytes = "{\"step\": 1, \"loss\": 1.0}\nsomeone else's file\n";
  int n = 0;
  struct Link {
    std::string name, overrides, link;  // link: relative to output_dir, leads to `victim`'s dir
    bool to_dir;                        // the link is a directory on the way, not the file
  };
  for (const Link& l : std::vector<Link>{
           {"metrics link, overwrite", "overwrite_output_dir=true", "metrics.jsonl", false},
           {"metrics link, no overwrite", "", "metrics.jsonl", false},
           {"metrics through a linked directory, overwrite",
            "overwrite_output_dir=true metrics=OUT/logs/precious.txt", "logs", true},
       }) {
    for (const bool empty : {false, true}) {
      SCOPED_TRACE(l.name + (empty ? " (empty target)" : ""));
      write_bytes(victim, empty ? "" : bytes);
      const std::string o = tmp.file("out" + std::to_string(n++));
      fs::create_directories(o);
      const std::string link = o + "/" + l.link;
      fs::create_symlink(l.to_dir ? fs::path(victim).parent_path() : fs::path(victim), link);
      std::string overrides = l.overrides;
      if (const size_t at = overrides.find("OUT"); at != std::string::npos)
        overrides.replace(at, 3, o);
      expect_clean_error(
          {l.name,
           "train " + kChat + "/sft.yaml max_steps=1 output_dir=" + o + " " + overrides,
           {"metrics", link + " is a symlink", "output_dir " + o}},
          src());
      EXPECT_EQ(read_bytes(victim), empty ? "" : bytes);
      EXPECT_TRUE(fs::is_symlink(link));
      EXPECT_FALSE(fs::exists(o + "/checkpoint-1"));
    }
  }
}

}  // namespace
}  // namespace sbp
