// `streambp generate` (engine/generate.cpp, cli/cmd_generate.cpp): greedy generation equals
// transformers' generate(do_sample=False) token for token on the parity models
// (tests/fixtures/hf/<name>/generate.json, tools/hf_parity/make_generate_fixtures.py), its
// log-probs equal `streambp score`'s on the same sequences, sampling is reproducible, and prompts
// given as text or conversations go through the trainer's tokenizer and chat template.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/test_support.h"

namespace sbp {
namespace {

using json = nlohmann::json;

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

std::string fixture_dir(const std::string& name) {
  return test::source_dir() + "/tests/fixtures/hf/" + name;
}

// Runs `streambp generate` with `flags` on prompts written as prompt_ids; returns its records.
std::vector<json> generate(const test::TempDir& tmp, const std::string& model,
                           const std::vector<std::vector<int>>& prompts, const std::string& flags) {
  std::string lines;
  for (const auto& p : prompts) lines += json{{"prompt_ids", p}}.dump() + "\n";
  test::write_text(tmp.file("prompts.jsonl"), lines);
  const test::CommandResult r =
      test::run_command(test::streambp_binary() + " generate --model " + model + " --input " +
                        tmp.file("prompts.jsonl") + " --output " + tmp.file("out.jsonl") +
                        " --threads 2 " + flags + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_jsonl(tmp.file("out.jsonl"));
}

class GreedyParity : public ::testing::TestWithParam<const char*> {};

TEST_P(GreedyParity, EqualsTransformersTokenForToken) {
  const std::string name = GetParam();
  const json fx = json::parse(test::read_text(fixture_dir(name) + "/generate.json"));
  const auto prompts = fx["prompts"].get<std::vector<std::vector<int>>>();
  const int max_new = fx["max_new_tokens"].get<int>();
  test::TempDir tmp;
  // Default mode, and the prompt's forward in chunks of 3 rows (stream): the same tokens.
  for (const std::string& flags : {std::string(""), std::string("--mode stream --layer-chunk 3")}) {
    const std::vector<json> out =
        generate(tmp, fixture_dir(name) + "/model", prompts,
                 "--greedy --max-new-tokens " + std::to_string(max_new) + " " + flags);
    ASSERT_EQ(out.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      SCOPED_TRACE("prompt " + std::to_string(i) + " " + flags);
      EXPECT_EQ(out[i]["ids"].get<std::vector<int>>(),
                fx["completions"][i].get<std::vector<int>>());
      EXPECT_EQ(out[i]["finish_reason"], "length");
      const auto lp = out[i]["logprobs"].get<std::vector<double>>();
      const auto want = fx["logprobs"][i].get<std::vector<double>>();
      ASSERT_EQ(lp.size(), want.size());
      for (size_t t = 0; t < lp.size(); ++t) EXPECT_NEAR(lp[t], want[t], 2e-5) << "token " << t;
    }
  }
}

// mistral_sliding_window: every layer a window of 6, so the cached attention of every token
// past the sixth drops keys; without the window transformers' tokens differ from the first or
// within the first 6 new tokens of every prompt.
INSTANTIATE_TEST_SUITE_P(Fixtures, GreedyParity,
                         ::testing::Values("qwen3_gqa_qknorm", "llama_rope_llama3",
                                           "qwen2_bias_tied", "mistral_sliding_window"));

TEST(Generate, LogprobsEqualScoresOnTheSameSequences) {
  test::TempDir tmp;
  const std::string model = fixture_dir("qwen3_gqa_qknorm") + "/model";
  const std::vector<std::vector<int>> prompts = {{3, 14, 15}, {92, 65, 35, 89, 79, 32}};
  // Sampled (not greedy), so that the scored tokens are not all the most likely ones.
  const std::vector<json> out =
      generate(tmp, model, prompts, "--temperature 1.3 --top-k 50 --max-new-tokens 20 --seed 7");
  ASSERT_EQ(out.size(), 2u);
  json seqs = json::array();
  for (size_t i = 0; i < 2; ++i) {
    std::vector<int> s = prompts[i];
    for (int id : out[i]["ids"]) s.push_back(id);
    seqs.push_back(s);
  }
  test::write_text(tmp.file("tokens.json"), json{{"sequences", seqs}}.dump());
  const test::CommandResult r =
      test::run_command(test::streambp_binary() + " score --model " + model + " --input " +
                        tmp.file("tokens.json") + " --json " + tmp.file("score.json") + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json score = json::parse(test::read_text(tmp.file("score.json")));
  for (size_t i = 0; i < 2; ++i) {
    // score's logprobs[i][t]: log p(token t+1 | tokens <= t); completion token k is row P+k.
    const auto lp = score["logprobs"][i].get<std::vector<double>>();
    const auto gen = out[i]["logprobs"].get<std::vector<double>>();
    const size_t P = prompts[i].size();
    for (size_t k = 0; k < gen.size(); ++k)
      EXPECT_NEAR(gen[k], lp[P - 1 + k], 1e-5) << "sequence " << i << " token " << k;
  }
}

TEST(Generate, SamplingIsReproducibleAndPerSample) {
  test::TempDir tmp;
  const std::string model = fixture_dir("llama_rope_llama3") + "/model";
  const std::string flags = "--num-return-sequences 3 --max-new-tokens 12 --top-p 0.9 --seed 5";
  const std::vector<json> a = generate(tmp, model, {{1, 2, 3}, {4}}, flags);
  const std::vector<json> b = generate(tmp, model, {{1, 2, 3}, {4}}, flags);
  // Only the second prompt: its samples do not depend on the first prompt's draws.
  const std::vector<json> only = generate(tmp, model, {{1, 2, 3}}, flags);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(only[r]["ids"], a[r]["ids"]);
  EXPECT_NE(a[0]["ids"], a[1]["ids"]);  // distinct streams per sample
  const std::vector<json> c = generate(tmp, model, {{1, 2, 3}, {4}}, "--num-return-sequences 3 "
                                                                       "--max-new-tokens 12 --top-p 0.9 --seed 6");
  EXPECT_NE(a, c);
}

TEST(Generate, ChatPromptsUseTheTrainersTemplate) {
  test::TempDir tmp;
  const std::string model = test::source_dir() + "/examples/tiny-chat";
  test::write_text(tmp.file("prompts.jsonl"),
                   R"({"prompt": [{"role": "user", "content": "What is 2 times 3?"}]})"
                   "\n"
                   R"({"messages": [{"role": "user", "content": "Hi"}], "answer": "6"})"
                   "\n");
  // Random weights (the directory has no safetensors): what is checked is the prompt's path.
  const test::CommandResult r = test::run_command(
      test::streambp_binary() + " generate --model " + model + " --input " +
      tmp.file("prompts.jsonl") + " --output " + tmp.file("out.jsonl") +
      " --greedy --max-new-tokens 8 --seed 1 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kv_cache"), std::string::npos) << r.output;
  const std::vector<json> out = read_jsonl(tmp.file("out.jsonl"));
  ASSERT_EQ(out.size(), 2u);
  // "<|im_start|>user\nWhat is 2 times 3?<|im_end|>\n<|im_start|>assistant\n" with Qwen3's empty
  // think block or not: at least the rendered turn, far more than the raw text's tokens.
  EXPECT_GT(out[0]["prompt_tokens"].get<int>(), 10);
  EXPECT_TRUE(out[0].contains("completion"));
  EXPECT_EQ(out[0]["ids"].size(), out[0]["logprobs"].size());
}

TEST(Generate, StopIdsEndTheCompletionAndStayInIt) {
  const json fx = json::parse(test::read_text(fixture_dir("qwen3_gqa_qknorm") + "/generate.json"));
  const auto prompt = fx["prompts"][2].get<std::vector<int>>();
  const auto full = fx["completions"][2].get<std::vector<int>>();
  const int stop = full[5];
  const size_t first = static_cast<size_t>(std::find(full.begin(), full.end(), stop) - full.begin());
  test::TempDir tmp;
  const std::vector<json> out =
      generate(tmp, fixture_dir("qwen3_gqa_qknorm") + "/model", {prompt},
               "--greedy --max-new-tokens 64 --stop-id " + std::to_string(stop));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["ids"].get<std::vector<int>>(),
            std::vector<int>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(first + 1)));
  EXPECT_EQ(out[0]["finish_reason"], "stop");
}

TEST(Generate, BadInputNamesTheLine) {
  test::TempDir tmp;
  const std::string model = fixture_dir("qwen3_gqa_qknorm") + "/model";
  const auto fails = [&](const std::string& lines, const std::string& flags) {
    test::write_text(tmp.file("bad.jsonl"), lines);
    const test::CommandResult r =
        test::run_command(test::streambp_binary() + " generate --model " + model + " --input " +
                          tmp.file("bad.jsonl") + " " + flags + " 2>&1");
    EXPECT_NE(r.exit_code, 0);
    return r.output;
  };
  EXPECT_NE(fails("{\"prompt_ids\": [1]}\n{\"prompt_ids\": [1, 999]}\n", "")
                .find("bad.jsonl:2: prompt_ids[1] = 999 is not a token id in [0, 128)"),
            std::string::npos);
  EXPECT_NE(fails("{\"prompt\": \"text\"}\n", "").find("bad.jsonl:1: a text or conversation "
                                                         "prompt needs a tokenizer"),
            std::string::npos);
  EXPECT_NE(fails("{\"prompt_ids\": [1]}\n", "--max-new-tokens 300")
                .find("exceeds max_position_embeddings (256)"),
            std::string::npos);
  EXPECT_NE(fails("{\"prompt_ids\": [1]}\n", "--top-p 1.5").find("--top-p"), std::string::npos);
  EXPECT_NE(fails("not json\n", "").find("bad.jsonl:1: invalid JSON"), std::string::npos);
}

}  // namespace
}  // namespace sbp
