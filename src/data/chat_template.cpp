#include "data/chat_template.h"

#include <cstdio>

#include "core/error.h"

namespace sbp {

namespace {

// The rendered text and its trained byte ranges, built piece by piece.
class Renderer {
 public:
  void add(const std::string& s, bool trained = false) {
    if (trained && !s.empty()) {
      if (!out_.trained.empty() && out_.trained.back().second == out_.text.size()) {
        out_.trained.back().second += s.size();  // contiguous with the previous trained piece
      } else {
        out_.trained.emplace_back(out_.text.size(), out_.text.size() + s.size());
      }
    }
    out_.text += s;
  }
  RenderedChat take() { return std::move(out_); }

 private:
  RenderedChat out_;
};

bool contains(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }

// Python's str.strip('\n') family: only newline characters.
std::string lstrip_newlines(const std::string& s) {
  const size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstrip_newlines(const std::string& s) {
  const size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}
std::string strip_newlines(const std::string& s) { return lstrip_newlines(rstrip_newlines(s)); }

// Decodes the UTF-8 character starting at s[i] (or ending just before s[i] with `backward`);
// returns its code point and byte length, or (-1, 1) for a byte that starts no valid character.
std::pair<int32_t, size_t> utf8_at(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size()) return {-1, 1};
  int32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return {cp, len};
}

bool python_isspace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Qwen3's split of an assistant message into reasoning and answer (its template, verbatim):
//   content   = content.split('</think>')[-1].lstrip('\n')
//   reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
void qwen3_split_reasoning(const ChatMessage& m, std::string& content, std::string& reasoning) {
  content = m.content;
  reasoning.clear();
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
    return;
  }
  const std::string close = "</think>", open = "<think>";
  if (!contains(m.content, close)) return;
  content = lstrip_newlines(m.content.substr(m.content.rfind(close) + close.size()));
  std::string before = rstrip_newlines(m.content.substr(0, m.content.find(close)));
  const size_t o = before.rfind(open);
  if (o != std::string::npos) before = before.substr(o + open.size());
  reasoning = lstrip_newlines(before);
}

void render_qwen3(Renderer& r, std::span<const ChatMessage> msgs, const RenderOptions& opts) {
  const int64_t n = static_cast<int64_t>(msgs.size());
  if (n > 0 && msgs[0].role == "system")
    r.add("<|im_start|>system\n" + msgs[0].content + "<|im_end|>\n");
  // The last user message that is a real query (not a tool response the user relayed): only
  // assistant turns after it keep their reasoning.
  int64_t last_query = n - 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    const ChatMessage& m = msgs[static_cast<size_t>(i)];
    if (m.role == "user" &&
        !(m.content.starts_with("<tool_response>") && m.content.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const ChatMessage& m = msgs[static_cast<size_t>(i)];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      r.add("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
    } else if (m.role == "assistant") {
      std::string content, reasoning;
      qwen3_split_reasoning(m, content, reasoning);
      std::string body = content;
      if (i > last_query && (i == n - 1 || !reasoning.empty())) {
        body =
            "<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content);
      }
      r.add("<|im_start|>assistant\n");
      r.add(body + "<|im_end|>", static_cast<size_t>(i) >= opts.train_from);
      r.add("\n");
    } else if (m.role == "tool") {
      if (i == 0 || msgs[static_cast<size_t>(i - 1)].role != "tool") r.add("<|im_start|>user");
      r.add("\n<tool_response>\n" + m.content + "\n</tool_response>");
      if (i == n - 1 || msgs[static_cast<size_t>(i + 1)].role != "tool") r.add("<|im_end|>\n");
    }
  }
  if (opts.add_generation_prompt) {
    r.add("<|im_start|>assistant\n");
    if (!opts.enable_thinking) r.add("<think>\n\n</think>\n\n");
  }
}

void render_chatml(Renderer& r, const ChatTemplate& t, std::span<const ChatMessage> msgs,
                   const RenderOptions& opts) {
  const size_t n = msgs.size();
  if (!t.default_system.empty() && (n == 0 || msgs[0].role != "system")) {
    r.add("<|im_start|>system\n" + t.default_system + "<|im_end|>\n");
  }
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool" && t.tool_responses_in_user) {
      if (i == 0 || msgs[i - 1].role != "tool") r.add("<|im_start|>user");
      r.add("\n<tool_response>\n" + m.content + "\n</tool_response>");
      if (i + 1 == n || msgs[i + 1].role != "tool") r.add("<|im_end|>\n");
    } else if (m.role == "assistant") {
      r.add("<|im_start|>assistant\n");
      r.add(m.content + "<|im_end|>", i >= opts.train_from);
      r.add("\n");
    } else {
      r.add("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
    }
  }
  if (opts.add_generation_prompt) r.add("<|im_start|>assistant\n");
}

void render_llama3_turn(Renderer& r, const ChatMessage& m, bool trained) {
  r.add("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
  r.add(python_strip(m.content) + "<|eot_id|>", m.role == "assistant" && trained);
}

void render_llama3(Renderer& r, const ChatTemplate& t, std::span<const ChatMessage> msgs,
                   const RenderOptions& opts) {
  r.add(t.bos_token);
  size_t first = 0;
  std::string system;
  if (!msgs.empty() && msgs[0].role == "system") {
    system = python_strip(msgs[0].content);
    first = 1;
  }
  r.add(
      "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
      "Today Date: " +
      t.date_string + "\n\n" + system + "<|eot_id|>");
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "tool") {
      // The template's `message.content is iterable` holds for strings: they go out as JSON.
      r.add("<|start_header_id|>ipython<|end_header_id|>\n\n" + python_json_string(m.content) +
            "<|eot_id|>");
    } else {
      render_llama3_turn(r, m, i >= opts.train_from);
    }
  }
  if (opts.add_generation_prompt) r.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_llama3_0(Renderer& r, const ChatTemplate& t, std::span<const ChatMessage> msgs,
                     const RenderOptions& opts) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) r.add(t.bos_token);
    render_llama3_turn(r, msgs[i], i >= opts.train_from);
  }
  if (opts.add_generation_prompt) r.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Gemma 3's template: the system message (verbatim, not trimmed) + "\n\n" opens the first user
// turn; then turn i must be a user message exactly when i is even, or the template raises.
void render_gemma(Renderer& r, const ChatTemplate& t, std::span<const ChatMessage> msgs,
                  const RenderOptions& opts) {
  // The template reads messages[0] first: with no messages, Jinja fails on the undefined item.
  if (msgs.empty()) throw InputError("gemma chat template: the conversation has no messages");
  r.add(t.bos_token);
  std::string first_user_prefix;
  size_t first = 0;
  if (msgs[0].role == "system") {
    if (!t.system_in_first_user) {
      throw InputError(
          "gemma chat template: this template (Gemma 1/2) has no system role; "
          "drop the system message or use Gemma 3's template");
    }
    first_user_prefix = msgs[0].content + "\n\n";
    first = 1;
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    const size_t turn = i - first;
    if ((m.role == "user") != (turn % 2 == 0)) {
      throw InputError(
          "gemma chat template: roles must alternate user/assistant/... after an "
          "optional system message, but message " +
          std::to_string(i) + " is '" + m.role + "'");
    }
    const bool model = m.role == "assistant";
    r.add("<start_of_turn>" + (model ? std::string("model") : m.role) + "\n" +
          (turn == 0 ? first_user_prefix : std::string()));
    r.add(python_strip(m.content) + "<end_of_turn>", model && i >= opts.train_from);
    r.add("\n");
  }
  if (opts.add_generation_prompt) r.add("<start_of_turn>model\n");
}

// Undoes the escapes of a Jinja string literal (\n, \t, \', \", \\).
std::string jinja_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A default system turn is written in the template as one string literal,
// '<|im_start|>system\n...<|im_end|>' (\n as the two characters backslash, n): the text
// between the markers holds no quote (it would end the literal) and no '<'. "" when none.
std::string literal_default_system(const std::string& src) {
  const std::string open = "<|im_start|>system\\n", close = "<|im_end|>";
  for (size_t p = src.find(open); p != std::string::npos; p = src.find(open, p + 1)) {
    const size_t b = p + open.size();
    size_t e = b;
    while (e < src.size() && src[e] != '\'' && src[e] != '"' && src[e] != '<') ++e;
    if (e > b && src.compare(e, close.size(), close) == 0)
      return jinja_unescape(src.substr(b, e - b));
  }
  return "";
}

const char* const kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

}  // namespace

std::string python_strip(const std::string& s) {
  size_t b = 0;
  while (b < s.size()) {
    const auto [cp, len] = utf8_at(s, b);
    if (!python_isspace(cp)) break;
    b += len;
  }
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;  // back up to the first byte of the last character
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    const auto [cp, len] = utf8_at(s, start);
    if (start + len != e || !python_isspace(cp)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

std::string python_json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

std::string ChatTemplate::name() const {
  switch (family) {
    case ChatFamily::qwen3: return "qwen3";
    case ChatFamily::llama3: return "llama3";
    case ChatFamily::llama3_0: return "llama3.0";
    case ChatFamily::gemma: return system_in_first_user ? "gemma" : "gemma (no system role)";
    case ChatFamily::chatml:
      if (default_system == kQwenDefaultSystem && tool_responses_in_user) return "qwen2.5";
      if (default_system.empty() && !tool_responses_in_user) return "chatml";
      return std::string("chatml (") + (default_system.empty() ? "" : "default system prompt") +
             (default_system.empty() || !tool_responses_in_user ? "" : ", ") +
             (tool_responses_in_user ? "tool responses in user turns" : "") + ")";
  }
  return "chatml";
}

ChatTemplate chat_template_for(ChatTemplateName name) {
  ChatTemplate t;
  switch (name) {
    case ChatTemplateName::chatml: break;
    case ChatTemplateName::qwen2:
    case ChatTemplateName::qwen2_5:
      t.default_system =
          name == ChatTemplateName::qwen2 ? "You are a helpful assistant." : kQwenDefaultSystem;
      t.tool_responses_in_user = true;
      break;
    case ChatTemplateName::qwen3: t.family = ChatFamily::qwen3; break;
    case ChatTemplateName::llama3: t.family = ChatFamily::llama3; break;
    case ChatTemplateName::llama3_0: t.family = ChatFamily::llama3_0; break;
    case ChatTemplateName::gemma:
      t.family = ChatFamily::gemma;
      t.bos_token = "<bos>";
      break;
  }
  return t;
}

ChatTemplate chat_template_by_name(const std::string& name, const std::string& where) {
  ChatTemplateName n{};
  if (!try_parse_enum<ChatTemplateName>(kChatTemplateNames, name, &n))
    throw InputError(where + ": unknown chat template '" + name + "' (expected auto, " +
                     enum_choices<ChatTemplateName>(kChatTemplateNames) + ")");
  return chat_template_for(n);
}

// Markers, from the templates the families ship with:
//   qwen3     <|im_start|> + <think> + reasoning_content + last_query_index
//   chatml    <|im_start|>; a default system turn is a literal '<|im_start|>system\n...<|im_end|>'
//             string in the template; <tool_response> means Qwen-style tool turns
//   llama3    <|start_header_id|> + <|eot_id|> + "Cutting Knowledge Date"; llama3.0 without it
//   gemma     <start_of_turn> + <end_of_turn> + the "model" role; Gemma 3's folds the system
//             message in with first_user_prefix, older ones have no system role
ChatTemplate detect_chat_template(const std::string& src, const std::string& where) {
  ChatTemplate t;
  if (contains(src, "<start_of_turn>") && contains(src, "<end_of_turn>") &&
      contains(src, "model")) {
    t = chat_template_for(ChatTemplateName::gemma);
    t.system_in_first_user = contains(src, "first_user_prefix");
    return t;
  }
  if (contains(src, "<|im_start|>")) {
    if (contains(src, "<think>") && contains(src, "reasoning_content") &&
        contains(src, "last_query_index")) {
      t.family = ChatFamily::qwen3;
      return t;
    }
    t.default_system = literal_default_system(src);
    t.tool_responses_in_user = contains(src, "<tool_response>");
    return t;
  }
  if (contains(src, "<|start_header_id|>") && contains(src, "<|eot_id|>")) {
    t.family = contains(src, "Cutting Knowledge Date") ? ChatFamily::llama3 : ChatFamily::llama3_0;
    return t;
  }
  throw InputError(where +
                   ": chat template not recognised (no ChatML <|im_start|>, Llama 3 "
                   "<|start_header_id|> or Gemma <start_of_turn> markers); set "
                   "data.chat_template to one of chatml, qwen2.5, qwen3, llama3, llama3.0, gemma");
}

RenderedChat render_chat(const ChatTemplate& tmpl, std::span<const ChatMessage> messages,
                         const RenderOptions& opts) {
  Renderer r;
  switch (tmpl.family) {
    case ChatFamily::qwen3: render_qwen3(r, messages, opts); break;
    case ChatFamily::chatml: render_chatml(r, tmpl, messages, opts); break;
    case ChatFamily::llama3: render_llama3(r, tmpl, messages, opts); break;
    case ChatFamily::llama3_0: render_llama3_0(r, tmpl, messages, opts); break;
    case ChatFamily::gemma: render_gemma(r, tmpl, messages, opts); break;
  }
  return r.take();
}

}  // namespace sbp
