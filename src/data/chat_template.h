#pragma once
// Chat templates, rendered natively rather than by a Jinja interpreter: the families fine-tuning
// users meet, each reproducing byte for byte what transformers' apply_chat_template renders with
// the model's real template, for the conversations we accept (roles system / user / assistant /
// tool, string content, Qwen3's reasoning_content). Checked against fixtures recorded from the real
// templates (tests/fixtures/chat, tools/chat_template_fixtures.py). Tool definitions (`tools=`) and
// assistant `tool_calls` are not supported; the dataset reader rejects them.
//
//   chatml    <|im_start|>{role}\n{content}<|im_end|>\n per message (many fine-tunes, Qwen2)
//   qwen2.5   chatml + a default system turn when there is none + tool messages as
//             <tool_response> blocks inside one user turn (Qwen2 / Qwen2.5 templates)
//   qwen3     Qwen3's template: reasoning split out of <think>...</think> (or reasoning_content),
//             kept only for assistant turns after the last user query, and an empty
//             "<think>\n\n</think>\n\n" block on the final assistant turn when it has no reasoning
//   llama3    Llama 3.1 / 3.2 / 3.3: <|begin_of_text|>, a system header that always carries
//             "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n", contents trimmed,
//             tool messages as JSON strings under an `ipython` header
//   llama3.0  the original Llama 3 template: no dates, a system header only if given
//   gemma     Gemma 3 (instruction-tuned): <bos>, <start_of_turn>{user|model}\n{content, trimmed}
//             <end_of_turn>\n, "assistant" written as "model", a system message folded into the
//             first user turn ("{system}\n\n{user}"), roles after it strictly alternating
//             user/assistant (anything else is refused, as the template raises). Gemma 1/2
//             templates (no system role) render the same, and refuse a system message.
//
// The renderer also returns which bytes are TRAINED (the assistant-only loss): for every assistant
// message it is asked to train, everything its turn renders after the role header, through the
// end-of-turn token — <|im_end|> for ChatML/Qwen (Qwen3's <think> block included), <|eot_id|>
// for Llama 3, <end_of_turn> for Gemma. Never the header ("<|im_start|>assistant\n",
// "<start_of_turn>model\n"), never the "\n" ChatML and Gemma write after the end-of-turn token
// (the model stops at it; the newline is template glue).
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace sbp {

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only; rendered by qwen3 only
};

enum class ChatFamily { chatml, qwen3, llama3, llama3_0, gemma };

struct ChatTemplate {
  ChatFamily family = ChatFamily::chatml;
  std::string default_system;                   // chatml: the system turn used when there is none
  bool tool_responses_in_user = false;          // chatml: Qwen-style <tool_response> user turns
  std::string bos_token = "<|begin_of_text|>";  // llama3, llama3.0, gemma ("<bos>")
  std::string date_string = "26 Jul 2024";      // llama3: the template's own default date
  // gemma: Gemma 3 folds a system message into the first user turn; Gemma 1 and 2 templates
  // have no system role (they raise), so a system message is refused.
  bool system_in_first_user = true;

  // chatml | qwen2.5 | qwen3 | llama3 | llama3.0 | gemma (chatml+... if custom)
  std::string name() const;
};

// The templates a config can name. qwen2 is qwen2.5 with Qwen2's shorter default system
// prompt; llama3.1 is llama3; gemma3 is gemma.
enum class ChatTemplateName { chatml, qwen2, qwen2_5, qwen3, llama3, llama3_0, gemma };
inline constexpr EnumName<ChatTemplateName> kChatTemplateNames[] = {
    {ChatTemplateName::chatml, "chatml"},     {ChatTemplateName::qwen2, "qwen2"},
    {ChatTemplateName::qwen2_5, "qwen2.5"},   {ChatTemplateName::qwen3, "qwen3"},
    {ChatTemplateName::llama3, "llama3"},     {ChatTemplateName::llama3_0, "llama3.0"},
    {ChatTemplateName::gemma, "gemma"},       {ChatTemplateName::llama3, "llama3.1", true},
    {ChatTemplateName::gemma, "gemma3", true}};
ChatTemplate chat_template_for(ChatTemplateName name);
// The template `name` spells; InputError prefixed by `where` for anything else.
ChatTemplate chat_template_by_name(const std::string& name, const std::string& where);

// Recognises a Jinja chat template by its markers (see chat_template.cpp). Throws InputError
// prefixed by `where` when it is none of the families above.
ChatTemplate detect_chat_template(const std::string& jinja_source, const std::string& where);

struct RenderOptions {
  bool add_generation_prompt = false;
  bool enable_thinking = true;  // qwen3: false appends an empty think block to the prompt
  // Assistant messages at index >= train_from are trained (prompt/completion data trains only
  // the completion's messages).
  size_t train_from = 0;
};

struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> trained;  // byte ranges [begin, end) of `text`
};

// Renders a conversation. Throws InputError for a role the family cannot render (and, for
// gemma, for an empty conversation or roles that do not alternate, as its template does).
RenderedChat render_chat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                         const RenderOptions& opts = {});

// Python's str.strip() (Unicode whitespace), which Jinja's `trim` filter is.
std::string python_strip(const std::string& s);
// transformers' `tojson` filter on a string: json.dumps(s, ensure_ascii=False).
std::string python_json_string(const std::string& s);

}  // namespace sbp
