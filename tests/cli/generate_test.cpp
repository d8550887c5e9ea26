// `streambp generate` (engine/generate.cpp, cli/cmd_generate.cpp): greedy generation equals
// transformers' generate(do_sample=False) token for token on the parity models
// (tests/fixtures/hf/<name>/generate.json, tools/hf_parity/make_generate_fixtures.py), its
// log-probs equal `streambp score`'s on the same sequences, sampling is reproducible, and prompts
// given as text or conversations go through the trainer's tokenizer and chat template.
#include <gtest/gtest.h>

#include <cstdlib>

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
// STREAMBP_TEST_BACKEND=<name> (test_support.h) runs the program on that backend too, so that
// scripts/test-emu.sh checks greedy parity on the emulated CUDA backend.
std::string backend_flag() {
  const char* name = std::getenv("STREAMBP_TEST_BACKEND");
  return name && *name ? std::string("--backend ") + name + " " : std::string();
}

std::vector<json> generate(const test::TempDir& tmp, const std::string& model,
                           const std::vector<std::vector<int>>& prompts, const std::string& flags) {
  std::string lines;
  for (const auto& p : prompts) lines += json{{"prompt_ids", p}}.dump() + "\n";
  test::write_text(tmp.file("prompts.jsonl"), lines);
  const test::CommandResult r =
      test::run_command(test::streambp_binary() + " generate --model " + model + " --input " +
                        tmp.file("prompts.jsonl") + " --output " + tmp.file("out.jsonl") +
                        " --threads 2 " + backend_flag() + flags + " 2>&1");
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
  // Default mode, the prompt's forward in chunks of 3 rows (stream), and every prompt decoded
  // in one batch (prompts of different lengths, one row of each per step): the same tokens.
  const std::string all = "--batch-size " + std::to_string(prompts.size());
  for (const std::string& flags : {std::string(""), std::string("--mode stream --layer-chunk 3"),
                                   all, all + " --mode stream --layer-chunk 3"}) {
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
                                           "qwen2_bias_tied", "mistral_sliding_window",
                                           "llama_rope_yarn"));

// Dynamic rope (issue 52): transformers recomputes the frequencies from each forward's length,
// so a new token past max_position_embeddings (32 here) is rotated with its own step's
// frequencies and a 40-token prompt with its length's. Each prompt alone (a batch shares the
// longest prompt's length: docs/MODELS.md), whole and in stream chunks of 3 rows.
TEST(DynamicRopeGreedyParity, EachPromptAloneEqualsTransformers) {
  const json fx =
      json::parse(test::read_text(fixture_dir("llama_rope_dynamic") + "/generate.json"));
  const auto prompts = fx["prompts"].get<std::vector<std::vector<int>>>();
  const int max_new = fx["max_new_tokens"].get<int>();
  test::TempDir tmp;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (const std::string& flags : {std::string(""), std::string("--mode stream --layer-chunk 3")}) {
      SCOPED_TRACE("prompt " + std::to_string(i) + " " + flags);
      const std::vector<json> out =
          generate(tmp, fixture_dir("llama_rope_dynamic") + "/model", {prompts[i]},
                   "--greedy --max-new-tokens " + std::to_string(max_new) + " " + flags);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0]["ids"].get<std::vector<int>>(), fx["completions"][i].get<std::vector<int>>());
      const auto lp = out[0]["logprobs"].get<std::vector<double>>();
      const auto want = fx["logprobs"][i].get<std::vector<double>>();
      ASSERT_EQ(lp.size(), want.size());
      for (size_t t = 0; t < lp.size(); ++t) EXPECT_NEAR(lp[t], want[t], 2e-5) << "token " << t;
    }
  }
}

class LogprobsEqualScores : public ::testing::TestWithParam<const char*> {};

// Decoding (one row at a time, batched across sequences, against the cache) and scoring (the
// training step's forward over the whole sequence) give the same log-probs; with the sliding
// fixtures the 26-token sequences are longer than the window, so decoding must drop keys too.
TEST_P(LogprobsEqualScores, OnTheSameSequences) {
  test::TempDir tmp;
  const std::string model = fixture_dir(GetParam()) + "/model";
  const std::vector<std::vector<int>> prompts = {{3, 14, 15}, {62, 65, 35, 84, 79, 32}};
  // Sampled (not greedy), so that the scored tokens are not all the most likely ones; both
  // sequences in one decoding batch.
  const std::vector<json> out = generate(
      tmp, model, prompts, "--temperature 1.3 --top-k 50 --max-new-tokens 20 --seed 7 --batch-size 2");
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

INSTANTIATE_TEST_SUITE_P(Fixtures, LogprobsEqualScores,
                         ::testing::Values("qwen3_gqa_qknorm", "gemma3_sliding_softcap",
                                           "gemma3_mqa_pattern", "qwen2_sliding_window"));

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
  // Decoded one at a time, or all six together: each sample draws the same tokens; the
  // log-probs differ only by the rounding of a (B, d) GEMM against a (3, d) one.
  for (const char* batch : {" --batch-size 1", " --batch-size 6"}) {
    const std::vector<json> other = generate(tmp, model, {{1, 2, 3}, {4}}, flags + batch);
    ASSERT_EQ(other.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(other[i]["ids"], a[i]["ids"]) << batch << " sample " << i;
      EXPECT_EQ(other[i]["finish_reason"], a[i]["finish_reason"]);
      const auto x = other[i]["logprobs"].get<std::vector<double>>();
      const auto y = a[i]["logprobs"].get<std::vector<double>>();
      for (size_t t = 0; t < x.size(); ++t) EXPECT_NEAR(x[t], y[t], 1e-5) << batch;
    }
  }
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

TEST(Generate, StopStringsEndTheCompletionWhereTheyFirstAppear) {
  test::TempDir tmp;
  const std::string model = test::source_dir() + "/examples/tiny-chat";
  test::write_text(tmp.file("prompts.jsonl"), R"({"prompt": "Once upon a time"})" "\n");
  const auto run = [&](const std::string& flags) {
    const test::CommandResult r = test::run_command(
        test::streambp_binary() + " generate --model " + model + " --input " +
        tmp.file("prompts.jsonl") + " --output " + tmp.file("out.jsonl") +
        " --max-new-tokens 48 --temperature 1.5 --seed 3 --num-return-sequences 2 " + flags +
        " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_jsonl(tmp.file("out.jsonl"));
  };
  const std::vector<json> full = run("");
  ASSERT_EQ(full.size(), 2u);
  const std::string text = full[0]["completion"];
  ASSERT_GT(text.size(), 40u) << text;
  // A stop string from late in the first completion: the check must find it after many tokens.
  const std::string stop = text.substr(text.size() * 3 / 4, 3);
  const std::vector<json> cut = run("--stop '" + stop + "'");
  ASSERT_EQ(cut.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto all = full[i]["ids"].get<std::vector<int>>();
    const auto ids = cut[i]["ids"].get<std::vector<int>>();
    ASSERT_LE(ids.size(), all.size());
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.begin())) << "sample " << i;
    const std::string t = cut[i]["completion"];
    const size_t at = full[i]["completion"].get<std::string>().find(stop);
    if (at == std::string::npos) {  // never appears: the completion is untouched
      EXPECT_EQ(ids, all);
      continue;
    }
    // Ends with the token that completes the first occurrence, and keeps it.
    EXPECT_EQ(cut[i]["finish_reason"], "stop");
    EXPECT_GE(t.size(), at + stop.size()) << t;
    EXPECT_LT(t.find(stop), t.size()) << t;
  }
  EXPECT_EQ(cut[0]["finish_reason"], "stop");
}

TEST(Generate, OneSequenceStopsWhileTheBatchGoesOn) {
  const json fx = json::parse(test::read_text(fixture_dir("qwen3_gqa_qknorm") + "/generate.json"));
  const auto prompts = fx["prompts"].get<std::vector<std::vector<int>>>();
  const int stop = fx["completions"][2][5].get<int>();
  test::TempDir tmp;
  const std::vector<json> out =
      generate(tmp, fixture_dir("qwen3_gqa_qknorm") + "/model", prompts,
               "--greedy --max-new-tokens 64 --stop-id " + std::to_string(stop) +
                   " --batch-size " + std::to_string(prompts.size()));
  ASSERT_EQ(out.size(), prompts.size());
  int stopped = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    // Each completion is transformers' greedy one, cut after its first stop token if any.
    const auto full = fx["completions"][i].get<std::vector<int>>();
    const auto at = std::find(full.begin(), full.end(), stop);
    const std::vector<int> want(full.begin(), at == full.end() ? full.end() : at + 1);
    EXPECT_EQ(out[i]["ids"].get<std::vector<int>>(), want) << "prompt " << i;
    EXPECT_EQ(out[i]["finish_reason"], at == full.end() ? "length" : "stop") << "prompt " << i;
    stopped += at == full.end() ? 0 : 1;
  }
  EXPECT_LT(stopped, static_cast<int>(prompts.size()));  // some went on past the others' stop
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
