// The chat-template renderer and the assistant-only mask against fixtures recorded with
// transformers' apply_chat_template on the real Jinja templates (tools/chat_template_fixtures.py):
// rendered text, token ids and assistant masks, for Qwen3 (the real template and tokenizer from
// ../shared/tokenizers/qwen3), Qwen2.5, plain ChatML, Llama 3.1, Llama 3.0 and Gemma 3 (on the
// SentencePiece-style tests/fixtures/tokenizer/tiny_gemma.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/hf_tokenizer_config.h"
#include "data/masked_encoding.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace sbp {
namespace {

using nlohmann::json;

std::string fixtures() { return test::source_dir() + "/tests/fixtures/chat"; }

std::string tokenizer_dir(const std::string& name) {
  if (name == "shared:qwen3") {
    const std::string dir = test::source_dir() + "/../shared/tokenizers/qwen3";
    if (!std::filesystem::is_directory(dir)) {
      ADD_FAILURE() << dir
                    << " is missing: the tests expect the repository next to the project's "
                       "shared/ folder (shared/tokenizers/qwen3)";
      throw std::runtime_error("missing " + dir);
    }
    return dir;
  }
  if (name == "fixture:llama3") return fixtures() + "/llama3";
  if (name == "example:tiny-chat") return test::source_dir() + "/examples/tiny-chat";
  throw std::runtime_error("unknown tokenizer " + name);
}

// One encoder per tokenizer per program (Qwen3's takes about a second to load).
const MaskedEncoder& encoder(const std::string& name) {
  static std::map<std::string, std::unique_ptr<MaskedEncoder>> cache;
  auto& slot = cache[name];
  if (!slot) {
    slot = std::make_unique<MaskedEncoder>(
        name == "fixture:gemma"
            ? Tokenizer::from_file(test::source_dir() + "/tests/fixtures/tokenizer/tiny_gemma.json")
            : Tokenizer::from_dir(tokenizer_dir(name)));
  }
  return *slot;
}

ChatTemplate template_of(const std::string& config) {
  const HfTokenizerConfig hf = HfTokenizerConfig::load_dir(fixtures() + "/" + config);
  ChatTemplate t = detect_chat_template(hf.chat_template, hf.source);
  if (hf.bos_token) t.bos_token = *hf.bos_token;
  return t;
}

std::vector<ChatMessage> messages_of(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) {
    ChatMessage msg{m["role"].get<std::string>(), m["content"].get<std::string>(), std::nullopt};
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string())
      msg.reasoning_content = m["reasoning_content"].get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

TEST(ChatTemplate, MatchesTransformersTextIdsAndAssistantMasks) {
  std::istringstream lines(test::read_text(fixtures() + "/cases.jsonl"));
  std::string line;
  std::map<std::string, int> checked;
  while (std::getline(lines, line)) {
    const json row = json::parse(line);
    const std::string what = row["config"].get<std::string>() + "/" +
                             row["case"].get<std::string>() + " (" +
                             row["tokenizer"].get<std::string>() + ")";
    RenderOptions opts;
    opts.add_generation_prompt = row["add_generation_prompt"].get<bool>();
    if (row.contains("enable_thinking")) opts.enable_thinking = row["enable_thinking"].get<bool>();
    ++checked[row["config"].get<std::string>()];
    if (row.contains("error")) {
      // The template raised (Gemma's user/assistant alternation); so must the renderer.
      EXPECT_THROW(render_chat(template_of(row["config"]), messages_of(row["messages"]), opts),
                   InputError)
          << what;
      continue;
    }
    const RenderedChat r =
        render_chat(template_of(row["config"]), messages_of(row["messages"]), opts);
    EXPECT_EQ(r.text, row["text"].get<std::string>()) << what;
    const MaskedTokens t = encoder(row["tokenizer"]).encode(r.text, r.trained);
    EXPECT_TRUE(t.exact) << what;
    EXPECT_EQ(t.ids, row["ids"].get<std::vector<int32_t>>()) << what;
    std::vector<float> expected;
    for (int m : row["assistant_masks"].get<std::vector<int>>())
      expected.push_back(static_cast<float>(m));
    EXPECT_EQ(t.mask, expected) << what;
  }
  for (const char* config : {"qwen3", "qwen2_5", "chatml", "llama3_1", "llama3_0", "gemma3"})
    EXPECT_GE(checked[config], 20) << config;
}

TEST(ChatTemplate, DetectsTheFamilyFromTokenizerConfig) {
  EXPECT_EQ(template_of("qwen3").name(), "qwen3");
  EXPECT_EQ(template_of("qwen2_5").name(), "qwen2.5");
  EXPECT_EQ(template_of("chatml").name(), "chatml");
  EXPECT_EQ(template_of("llama3_1").name(), "llama3");
  EXPECT_EQ(template_of("llama3_0").name(), "llama3.0");
  EXPECT_EQ(template_of("gemma3").name(), "gemma");
  EXPECT_EQ(template_of("gemma3").bos_token, "<bos>");
  // The real Qwen3 file, as shipped.
  const HfTokenizerConfig hf = HfTokenizerConfig::load_dir(tokenizer_dir("shared:qwen3"));
  EXPECT_EQ(detect_chat_template(hf.chat_template, hf.source).name(), "qwen3");
  EXPECT_EQ(hf.eos_token.value_or(""), "<|im_end|>");
  EXPECT_FALSE(hf.bos_token.has_value());
  try {
    detect_chat_template("{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}",
                         "x.json");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("x.json: chat template not recognised"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(chat_template_by_name("vicuna", "cfg.yaml:3"), InputError);
  EXPECT_EQ(chat_template_by_name("llama3.1", "cfg").name(), "llama3");
  EXPECT_EQ(chat_template_by_name("gemma3", "cfg").name(), "gemma");
  EXPECT_EQ(chat_template_by_name("gemma", "cfg").bos_token, "<bos>");
}

TEST(ChatTemplate, GemmaRefusesWhatItsTemplatesRefuse) {
  const std::vector<ChatMessage> with_system = {{"system", "S", std::nullopt},
                                                {"user", "hi", std::nullopt}};
  const ChatTemplate gemma3 = chat_template_by_name("gemma", "");
  EXPECT_EQ(render_chat(gemma3, with_system).text,
            "<bos><start_of_turn>user\nS\n\nhi<end_of_turn>\n");
  // transformers refuses an empty conversation before rendering; so do we.
  EXPECT_THROW(render_chat(gemma3, std::vector<ChatMessage>{}), InputError);
  // Gemma 1/2 templates raise on a system message (no first_user_prefix in them).
  const ChatTemplate gemma2 = detect_chat_template(
      "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
      "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
      "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif "
      "%}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' "
      "}}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
      "gemma2.json");
  EXPECT_EQ(gemma2.name(), "gemma (no system role)");
  EXPECT_THROW(render_chat(gemma2, with_system), InputError);
  RenderOptions opts;
  opts.add_generation_prompt = true;
  EXPECT_EQ(render_chat(gemma2, std::span(with_system).subspan(1), opts).text,
            "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, TrainFromMarksOnlyLaterAssistantTurns) {
  const std::vector<ChatMessage> msgs = {{"user", "a", std::nullopt},
                                         {"assistant", "b", std::nullopt},
                                         {"user", "c", std::nullopt},
                                         {"assistant", "d", std::nullopt}};
  RenderOptions opts;
  opts.train_from = 2;
  const RenderedChat r = render_chat(chat_template_by_name("chatml", ""), msgs, opts);
  ASSERT_EQ(r.trained.size(), 1u);
  EXPECT_EQ(r.text.substr(r.trained[0].first, r.trained[0].second - r.trained[0].first),
            "d<|im_end|>");
  opts.train_from = 0;
  const RenderedChat all = render_chat(chat_template_by_name("llama3", ""), msgs, opts);
  ASSERT_EQ(all.trained.size(), 2u);
  EXPECT_EQ(all.text.substr(all.trained[1].first, all.trained[1].second - all.trained[1].first),
            "d<|eot_id|>");
  opts.train_from = 2;
  const RenderedChat gemma = render_chat(chat_template_by_name("gemma", ""), msgs, opts);
  ASSERT_EQ(gemma.trained.size(), 1u);
  EXPECT_EQ(
      gemma.text.substr(gemma.trained[0].first, gemma.trained[0].second - gemma.trained[0].first),
      "d<end_of_turn>");
}

TEST(ChatTemplate, PythonStripAndJson) {
  EXPECT_EQ(python_strip(" \t\n x y \r\n"), "x y");
  EXPECT_EQ(python_strip("\u3000\u00a0x\u2028"), "x");
  EXPECT_EQ(python_strip("\u00e9"), "\u00e9");
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_json_string("a\"b\\c\n\t\x01\u00e9"), "\"a\\\"b\\\\c\\n\\t\\u0001\u00e9\"");
}

TEST(MaskedEncoding, FallsBackToRangesWhenNormalizationChangesBytes) {
  // Qwen3 normalizes to NFC: a decomposed "é" changes the byte count, so spans cannot be
  // recovered from the whole-text encode and the ranges are encoded one by one.
  const MaskedEncoder& enc = encoder("shared:qwen3");
  const std::string text = "cafe\xcc\x81 ok";
  const std::pair<size_t, size_t> trained{7, text.size()};
  const MaskedTokens t = enc.encode(text, std::span(&trained, 1));
  EXPECT_FALSE(t.exact);
  EXPECT_EQ(t.mask.back(), 1.0f);
  EXPECT_EQ(t.mask.front(), 0.0f);
}

}  // namespace
}  // namespace sbp
