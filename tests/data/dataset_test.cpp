// JSONL datasets in TRL's schemas: what each record format becomes (tokens, loss masks, pairs,
// groups) and the one-line file:line error of every malformed input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "data/hf_tokenizer_config.h"
#include "support/test_support.h"

namespace sbp {
namespace {

std::string tiny_chat() { return test::source_dir() + "/examples/tiny-chat"; }

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_dir(tiny_chat());
  return t;
}

ExampleEncoder make_encoder(bool with_bos = false) {
  const HfTokenizerConfig hf = HfTokenizerConfig::load_dir(tiny_chat());
  PlainTextTokens plain;
  plain.eos = tok().token_to_id("<|im_end|>");
  if (with_bos) plain.bos = tok().token_to_id("<|endoftext|>");
  return ExampleEncoder(MaskedEncoder(tok()), detect_chat_template(hf.chat_template, hf.source),
                        plain);
}

Dataset load(const test::TempDir& dir, const std::string& lines, DatasetOptions opts = {}) {
  const std::string path = dir.file("data.jsonl");
  test::write_text(path, lines);
  return load_dataset(path, make_encoder(), opts);
}

// The same lines held in memory (the Python package's records, data/data_source.h).
Dataset load_in_memory(const std::string& lines, DatasetOptions opts = {}) {
  return load_dataset(DataSource(in_memory_label("data.train"),
                                 std::make_shared<const std::string>(lines)),
                      make_encoder(), opts);
}

// The error message of loading `lines`, which must fail: from a file, and the same from memory
// (after the file's name or the in-memory label, the message is the same).
std::string error_of(const std::string& lines, DatasetOptions opts = {}) {
  test::TempDir dir;
  try {
    load(dir, lines, opts);
  } catch (const InputError& e) {
    std::string msg = e.what();
    const std::string prefix = dir.file("data.jsonl");
    EXPECT_EQ(msg.rfind(prefix, 0), 0u) << "error does not start with the file name: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "error spans several lines: " << msg;
    std::string from_memory = "(no error)";
    try {
      load_in_memory(lines, opts);
    } catch (const InputError& m) {
      from_memory = m.what();
    }
    EXPECT_EQ(from_memory, in_memory_label("data.train") + msg.substr(prefix.size()));
    return msg.substr(prefix.size());
  }
  ADD_FAILURE() << "no error for: " << lines;
  return "";
}

// The decoded text of the trained tokens of a sequence.
std::string trained_text(const TokenizedSequence& s) {
  std::vector<int32_t> ids;
  for (size_t t = 0; t < s.ids.size(); ++t)
    if (s.mask[t] > 0.0f) ids.push_back(s.ids[t]);
  return tok().decode(ids);
}

TEST(Dataset, MessagesTrainEveryAssistantTurn) {
  test::TempDir dir;
  const Dataset ds = load(
      dir,
      R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Ciao"}]})"
      "\n\n");  // a trailing blank line is no record
  ASSERT_EQ(ds.examples.size(), 1u);
  EXPECT_EQ(ds.format, DataFormat::messages);
  EXPECT_EQ(ds.stats.records, 1);
  const TokenizedSequence& s = ds.examples[0].sequences[0];
  EXPECT_EQ(tok().decode(s.ids),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
            "assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<"
            "think>\n\n</think>\n\nCiao<|im_end|>\n");
  EXPECT_EQ(trained_text(s), "Hello<|im_end|><think>\n\n</think>\n\nCiao<|im_end|>");
  EXPECT_EQ(ds.stats.tokens, s.size());
  EXPECT_EQ(ds.stats.loss_tokens, s.loss_tokens());
}

TEST(Dataset, LinesInMemoryReadAsTheFile) {
  const std::string lines =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
      "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2\"}, "
      "{\"role\": \"assistant\", \"content\": \"4\"}]}";  // no newline at the end
  test::TempDir dir;
  const Dataset file = load(dir, lines);
  const Dataset memory = load_in_memory(lines);
  ASSERT_EQ(file.examples.size(), 2u);
  ASSERT_EQ(memory.examples.size(), file.examples.size());
  for (size_t i = 0; i < file.examples.size(); ++i) {
    EXPECT_EQ(memory.examples[i].lines, file.examples[i].lines);
    ASSERT_EQ(memory.examples[i].sequences.size(), file.examples[i].sequences.size());
    for (size_t s = 0; s < file.examples[i].sequences.size(); ++s) {
      EXPECT_EQ(memory.examples[i].sequences[s].ids, file.examples[i].sequences[s].ids);
      EXPECT_EQ(memory.examples[i].sequences[s].mask, file.examples[i].sequences[s].mask);
    }
  }
  EXPECT_EQ(memory.examples[1].lines.front(), 3);  // the blank line counts, as in the file
  EXPECT_EQ(memory.path, "data.train (in memory)");
}

TEST(Dataset, PromptCompletionTrainsTheCompletionOnly) {
  test::TempDir dir;
  const Dataset ds = load(
      dir,
      R"({"prompt": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}], "completion": [{"role": "assistant", "content": "d"}]})"
      "\n"
      R"({"prompt": "The sky is", "completion": " blue."})"
      "\n");
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(trained_text(ds.examples[0].sequences[0]), "<think>\n\n</think>\n\nd<|im_end|>");
  const TokenizedSequence& plain = ds.examples[1].sequences[0];
  EXPECT_EQ(tok().decode(plain.ids), "The sky is blue.<|im_end|>");  // eos appended
  EXPECT_EQ(trained_text(plain), " blue.<|im_end|>");
}

TEST(Dataset, TextTrainsEverythingAndCanStartWithBos) {
  test::TempDir dir;
  const std::string path = dir.file("t.jsonl");
  test::write_text(path, R"({"text": "one two three"})"
                         "\n");
  const Dataset ds = load_dataset(path, make_encoder(/*with_bos=*/true), {});
  const TokenizedSequence& s = ds.examples[0].sequences[0];
  EXPECT_EQ(tok().decode(s.ids), "<|endoftext|>one two three<|im_end|>");
  EXPECT_EQ(s.mask.front(), 0.0f);  // bos is context, not a target
  EXPECT_EQ(trained_text(s), "one two three<|im_end|>");
}

TEST(Dataset, PreferencePairsAndImplicitPrompt) {
  test::TempDir dir;
  const Dataset ds = load(
      dir,
      R"({"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "good"}], "rejected": [{"role": "assistant", "content": "bad"}]})"
      "\n"
      R"({"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "yes"}], "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no"}]})"
      "\n");
  EXPECT_EQ(ds.format, DataFormat::preference);
  ASSERT_EQ(ds.examples.size(), 2u);
  for (const Example& e : ds.examples) ASSERT_EQ(e.sequences.size(), 2u);
  EXPECT_EQ(trained_text(ds.examples[0].sequences[0]), "<think>\n\n</think>\n\ngood<|im_end|>");
  EXPECT_EQ(trained_text(ds.examples[0].sequences[1]), "<think>\n\n</think>\n\nbad<|im_end|>");
  EXPECT_EQ(trained_text(ds.examples[1].sequences[1]), "<think>\n\n</think>\n\nno<|im_end|>");
  // The implicit prompt is not trained: it is the same context for both.
  EXPECT_EQ(
      tok().decode(ds.examples[1].sequences[0].ids).rfind("<|im_start|>user\nq<|im_end|>\n", 0),
      0u);
}

TEST(Dataset, RolloutsAreGroupedByPrompt) {
  test::TempDir dir;
  const Dataset ds = load(dir, R"({"prompt": "p1", "completion": " a", "reward": 1})"
                               "\n"
                               R"({"prompt": "p2", "completion": " b", "reward": 0.5})"
                               "\n"
                               R"({"prompt": "p1", "completion": " c", "reward": -1})"
                               "\n");
  EXPECT_EQ(ds.format, DataFormat::rollout);
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].rewards, (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(ds.examples[0].lines, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ds.examples[1].rewards, (std::vector<double>{0.5}));
  EXPECT_EQ(trained_text(ds.examples[0].sequences[1]), " c<|im_end|>");
}

// KTO's unpaired records: one sequence each, its label carried as the example's reward (1 / 0).
TEST(Dataset, UnpairedPreferenceCarriesTheLabel) {
  test::TempDir dir;
  const Dataset ds = load(dir, R"({"prompt": "p1", "completion": " a", "label": true})"
                               "\n"
                               R"({"prompt": "p2", "completion": " b", "label": false})"
                               "\n");
  EXPECT_EQ(ds.format, DataFormat::unpaired_preference);
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[0].rewards, (std::vector<double>{1.0}));
  EXPECT_EQ(ds.examples[1].rewards, (std::vector<double>{0.0}));
  EXPECT_EQ(trained_text(ds.examples[1].sequences[0]), " b<|im_end|>");
  EXPECT_NE(error_of(R"({"prompt": "a", "completion": "b", "label": 1})")
                .find(":1: \"label\" must be true or false, got a number"),
            std::string::npos);
  DatasetOptions kto;
  kto.format = DataFormat::unpaired_preference;
  EXPECT_NE(
      error_of(R"({"prompt": "a", "completion": "b"})", kto).find(":1: missing field \"label\""),
      std::string::npos);
}

TEST(Dataset, EveryMalformedInputNamesFileAndLine) {
  const std::string ok =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
      "\n";
  EXPECT_NE(error_of(ok + "{\"messages\": [\n").find(":2: not valid JSON"), std::string::npos);
  EXPECT_NE(
      error_of(ok + R"({"text": "x"})"
                    "\n")
          .find(
              ":2: missing field \"messages\" (the file holds messages records, as line 1 shows)"),
      std::string::npos);
  EXPECT_NE(error_of(ok + ok + R"({"messages": [{"role": "bot", "content": "x"}]})")
                .find(":3: messages[0]: role \"bot\" is not one of system, user, assistant, tool"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": []})").find(":1: \"messages\" is empty"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]})")
          .find(":1: messages[0]: \"content\" must be a string, got a list"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user"}]})")
                .find(":1: messages[0]: missing field \"content\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"content": "x"}]})")
                .find(":1: messages[0]: missing field \"role\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "x"}]})")
                .find(":1: \"messages\" has no assistant message"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f"}}]}]})")
          .find("\"tool_calls\" are not supported"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"messages": "hi"})")
                .find(":1: \"messages\" must be a list of messages, got a string"),
            std::string::npos);
  EXPECT_NE(error_of("[1, 2]\n").find(":1: expected a JSON object, got a list"), std::string::npos);
  EXPECT_NE(error_of(R"({"input": "x"})").find(":1: cannot tell the record format"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"prompt": "a", "completion": [{"role": "assistant", "content": "b"}]})")
          .find(":1: \"prompt\" and \"completion\" must both be strings or both be message lists"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "completion": "b", "reward": "high"})")
                .find(":1: \"reward\" must be a number, got a string"),
            std::string::npos);
  // A number past double's range is an out_of_range error of the JSON parser, not a parse error.
  EXPECT_NE(error_of(R"({"prompt": "a", "completion": "b", "reward": 1e999})")
                .find(":1: not valid JSON: "),
            std::string::npos);
  // Finite as a double but not as the float it is used as.
  EXPECT_NE(error_of(R"({"prompt": "a", "completion": "b", "reward": 1e300})")
                .find(":1: \"reward\" 1e+300 is outside fp32 range"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "chosen": "b"})").find(":1: missing field \"rejected\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"text": ""})").find(":1: \"text\" is empty"), std::string::npos);
  EXPECT_NE(error_of("\n\n").find(": no records"), std::string::npos);
}

TEST(Dataset, OverLongExamplesFollowTheTruncationPolicy) {
  const std::string long_text = R"({"text": ")" + std::string(400, 'z') + " end\"}\n";
  const std::string lines = R"({"text": "short"})"
                            "\n" +
                            long_text;
  DatasetOptions opts;
  opts.max_seq_len = 32;
  opts.max_tokens = 64;
  const std::string err = error_of(lines, opts);
  EXPECT_NE(err.find(":2: example has "), std::string::npos) << err;
  EXPECT_NE(err.find("more than max_seq_len 32"), std::string::npos) << err;

  test::TempDir dir;
  opts.truncation = Truncation::truncate;
  Dataset ds = load(dir, lines, opts);
  ASSERT_EQ(ds.examples.size(), 2u);
  EXPECT_EQ(ds.examples[1].sequences[0].size(), 32);
  EXPECT_EQ(ds.stats.truncated, 1);
  opts.truncation = Truncation::skip;
  ds = load(dir, lines, opts);
  ASSERT_EQ(ds.examples.size(), 1u);
  EXPECT_EQ(ds.stats.skipped, 1);

  // A group larger than a micro-batch cannot be packed, whatever max_seq_len allows.
  std::string group;
  for (int i = 0; i < 6; ++i)
    group += R"({"prompt": "p", "completion": " a fairly long completion here", "reward": 1})"
             "\n";
  opts.truncation = Truncation::error;
  const std::string gerr = error_of(group, opts);
  EXPECT_NE(gerr.find(":1: the group of 6 completions"), std::string::npos) << gerr;
  EXPECT_NE(gerr.find("more than max_tokens 64"), std::string::npos) << gerr;
}

TEST(Dataset, ConversationsWithoutATemplateFailClearly) {
  test::TempDir dir;
  const std::string path = dir.file("d.jsonl");
  test::write_text(
      path,
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"
      "\n");
  const ExampleEncoder enc(MaskedEncoder(tok()), std::nullopt, PlainTextTokens{},
                           "needs a chat template: set data.chat_template");
  try {
    load_dataset(path, enc, {});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ":1: needs a chat template: set data.chat_template");
  }
}

}  // namespace
}  // namespace sbp
