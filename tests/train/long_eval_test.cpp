// streambp eval (issue 52): the passkey sample's layout, the scoring of a cell from the rows'
// log-probs and argmax, perplexity buckets, and the command end to end on a tiny trained model
// (table, JSON, heat map, and the memory of the streamed forward against a full one).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/tokenizer.h"
#include "train/long_eval.h"
#include "train/passkey_task.h"
#include "train/train_run.h"

namespace sbp {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

Tokenizer tiny_tokenizer() {
  return Tokenizer::from_dir(test::source_dir() + "/examples/tiny-chat");
}

std::vector<int32_t> filler(const Tokenizer& tok) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += builtin_filler_text();
  return tok.encode(text, false);
}

TEST(Passkey, SampleHasTheLengthTheDepthAndTheKeyLast) {
  const Tokenizer tok = tiny_tokenizer();
  const std::vector<int32_t> f = filler(tok);
  const std::string key = passkey_for(7, 300, 1, 0);
  ASSERT_EQ(key.size(), 5u);
  EXPECT_NE(key, passkey_for(7, 300, 2, 0));  // each cell its own key
  const std::vector<int32_t> answer = tok.encode(" " + key, false);
  const std::vector<int32_t> needle =
      tok.encode(" The pass key is " + key + ". Remember it. " + key + " is the pass key.", false);
  int64_t prev = -1;
  for (double depth : {0.0, 0.5, 1.0}) {
    const PasskeySample s = make_passkey_sample(tok, 1, f, 300, depth, key);
    ASSERT_EQ(s.tokens.size(), 300u);
    EXPECT_EQ(s.tokens.front(), 1);  // bos
    EXPECT_EQ(
        std::vector<int32_t>(s.tokens.end() - static_cast<int64_t>(answer.size()), s.tokens.end()),
        answer);
    EXPECT_EQ(s.answer_begin, 300 - static_cast<int64_t>(answer.size()));
    EXPECT_EQ(std::vector<int32_t>(
                  s.tokens.begin() + s.needle_begin,
                  s.tokens.begin() + s.needle_begin + static_cast<int64_t>(needle.size())),
              needle);
    EXPECT_GT(s.needle_begin, prev);  // deeper keys sit later
    prev = s.needle_begin;
  }
  EXPECT_THROW(make_passkey_sample(tok, 1, f, 20, 0.5, key), InputError);  // too short
  EXPECT_THROW(make_passkey_sample(tok, 1, f, 300, 1.5, key), InputError);
}

TEST(Passkey, CellsCountGreedyKeysAndSumTheirLogprobs) {
  const Tokenizer tok = tiny_tokenizer();
  const std::vector<int32_t> f = filler(tok);
  // A scorer that predicts every next token (argmax) with log-prob -0.25 except one row.
  const ScoreFn perfect = [](const Batch& b) {
    SequenceScores s;
    for (size_t t = 0; t < b.tokens.size(); ++t) {
      s.logp.push_back(t + 1 < b.tokens.size() ? -0.25f : 0.0f);
      s.argmax.push_back(t + 1 < b.tokens.size() ? b.tokens[t + 1] : 0);
    }
    return s;
  };
  const ScoreFn wrong_last = [&](const Batch& b) {
    SequenceScores s = perfect(b);
    s.argmax[b.tokens.size() - 2] += 1;  // the key's last token is not the most likely
    return s;
  };
  PasskeyOptions o{{200, 260}, {0.0, 1.0}, 2, 3};
  int calls = 0;
  const auto cells = run_passkey(perfect, tok, 1, f, o, [&](const PasskeyCell&) { ++calls; });
  ASSERT_EQ(cells.size(), 4u);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(cells[1].length, 200);
  EXPECT_EQ(cells[1].depth, 1.0);
  for (const PasskeyCell& c : cells) {
    EXPECT_EQ(c.found, 2);
    EXPECT_DOUBLE_EQ(c.key_logp, -0.25 * static_cast<double>(c.key_tokens));
  }
  for (const PasskeyCell& c : run_passkey(wrong_last, tok, 1, f, o, {})) EXPECT_EQ(c.found, 0);
}

TEST(Passkey, PerplexityBucketsByPredictedPosition) {
  const ScoreFn score = [](const Batch& b) {
    SequenceScores s;
    for (size_t t = 0; t < b.tokens.size(); ++t) {
      s.logp.push_back(-static_cast<float>(t + 1));  // row t predicts position t + 1
      s.argmax.push_back(0);
    }
    return s;
  };
  const auto buckets = perplexity_by_position(score, {std::vector<int32_t>(10, 3), {1, 2, 3}}, 4);
  ASSERT_EQ(buckets.size(), 3u);        // positions 1..9: [0,4), [4,8), [8,12)
  EXPECT_EQ(buckets[0].tokens, 3 + 2);  // positions 1, 2, 3 of the first; 1, 2 of the second
  EXPECT_DOUBLE_EQ(buckets[0].nll_sum, (1 + 2 + 3) + (1 + 2));
  EXPECT_EQ(buckets[1].tokens, 4);
  EXPECT_DOUBLE_EQ(buckets[1].mean_nll(), (4 + 5 + 6 + 7) / 4.0);
  EXPECT_EQ(buckets[2].tokens, 2);
}

// The command on a tiny model trained one step (its checkpoint has weights; the tokenizer is
// the example's).
TEST(EvalCommand, TableJsonHeatmapAndMemory) {
  const test::TrainRun run("max_steps: 1\n");
  ASSERT_EQ(run.train().exit_code, 0);
  test::TempDir tmp;
  std::string docs;
  std::string text;
  for (int i = 0; i < 30; ++i) text += "The sky is blue and the grass is green. ";
  docs = json{{"text", text}}.dump() + "\n" + json{{"text", text + text}}.dump() + "\n";
  test::write_text(tmp.file("docs.jsonl"), docs);
  const std::string heat = tmp.file("passkey.png");
  const test::CommandResult r = test::run_command(
      test::streambp_binary() + " eval --model " + run.out("checkpoint-1") + " --tokenizer " +
      test::source_dir() + "/examples/tiny-chat --lengths 256,384 --depths 0,0.5,1 --trials 2 " +
      "--input " + tmp.file("docs.jsonl") +
      " --bucket 64 --max-length 300 --layer-chunk 32 --head-chunk 32 --threads 1 --json " +
      tmp.file("eval.json") + " --heatmap " + heat + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("passkey: keys found"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("perplexity by position"), std::string::npos) << r.output;
  const json j = json::parse(test::read_text(tmp.file("eval.json")));
  ASSERT_EQ(j["passkey"].size(), 6u);
  EXPECT_EQ(j["passkey"][5]["length"], 384);
  EXPECT_EQ(j["passkey"][5]["trials"], 2);
  EXPECT_LT(j["passkey"][5]["key_logp"].get<double>(), 0.0);
  EXPECT_FALSE(j["perplexity"].empty());
  EXPECT_EQ(j["memory"]["tokens"], 384);
  // Stream mode in chunks of 32 rows holds less than a full forward of 384 rows.
  EXPECT_LT(j["memory"]["peak_bytes"].get<int64_t>(),
            j["memory"]["full_forward_peak_bytes"].get<int64_t>());
  ASSERT_TRUE(fs::exists(heat));
  const std::string png = test::read_text(heat);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  // --from: the same table and a heat map again from the JSON, without a model.
  const test::CommandResult again =
      test::run_command(test::streambp_binary() + " eval --from " + tmp.file("eval.json") +
                        " --heatmap " + tmp.file("again.svg") + " --title t 2>&1");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const size_t table = r.output.find("passkey: keys found");
  EXPECT_EQ(again.output.substr(0, again.output.find("eval: wrote")),
            r.output.substr(table, r.output.find("\n\n", table) - table + 1));
  EXPECT_NE(test::read_text(tmp.file("again.svg")).find("<svg"), std::string::npos);
}

}  // namespace
}  // namespace sbp
