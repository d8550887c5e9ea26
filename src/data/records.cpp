#include "data/records.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace sbp {

namespace {

using nlohmann::json;

const char* json_kind(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

bool has(const json& row, const char* key) { return row.contains(key); }

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw InputError(where + ": " + what);
}

ChatMessage parse_message(const json& m, const std::string& field, const std::string& where) {
  if (!m.is_object()) fail(where, field + " is " + json_kind(m) + ", expected a message object");
  ChatMessage msg;
  auto role = m.find("role");
  if (role == m.end()) fail(where, field + ": missing field \"role\"");
  if (!role->is_string())
    fail(where, field + ": \"role\" must be a string, got " + json_kind(*role));
  msg.role = role->get<std::string>();
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
    fail(where, field + ": role \"" + msg.role + "\" is not one of system, user, assistant, tool");
  if (auto tc = m.find("tool_calls");
      tc != m.end() && !tc->is_null() && !(tc->is_array() && tc->empty()))
    fail(where, field +
                    ": \"tool_calls\" are not supported (the chat templates here render text "
                    "turns only)");
  auto content = m.find("content");
  if (content == m.end()) fail(where, field + ": missing field \"content\"");
  if (!content->is_string()) {
    fail(where, field + ": \"content\" must be a string, got " + json_kind(*content) +
                    (content->is_array() ? " (multimodal content parts are not supported)" : ""));
  }
  msg.content = content->get<std::string>();
  if (auto r = m.find("reasoning_content"); r != m.end() && !r->is_null()) {
    if (!r->is_string())
      fail(where, field + ": \"reasoning_content\" must be a string or null, got " + json_kind(*r));
    if (msg.role != "assistant")
      fail(where, field + ": only assistant messages have reasoning_content");
    msg.reasoning_content = r->get<std::string>();
  }
  return msg;
}

std::vector<ChatMessage> parse_messages(const json& j, const std::string& field,
                                        const std::string& where) {
  if (!j.is_array())
    fail(where, "\"" + field + "\" must be a list of messages, got " + json_kind(j));
  if (j.empty()) fail(where, "\"" + field + "\" is empty");
  std::vector<ChatMessage> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i)
    out.push_back(parse_message(j[i], field + "[" + std::to_string(i) + "]", where));
  return out;
}

bool has_assistant(const std::vector<ChatMessage>& msgs) {
  for (const ChatMessage& m : msgs)
    if (m.role == "assistant") return true;
  return false;
}

const json& field(const json& row, const char* key, const std::string& where,
                  const std::string& format, const std::string& detected_from) {
  auto it = row.find(key);
  if (it == row.end()) {
    fail(where, std::string("missing field \"") + key + "\" (the file holds " + format +
                    " records, as " + detected_from + " shows)");
  }
  return *it;
}

TextOrChat parse_text_or_chat(const json& j, const std::string& name, const std::string& where) {
  TextOrChat t;
  if (j.is_string()) {
    t.text = j.get<std::string>();
  } else if (j.is_array()) {
    t.is_chat = true;
    t.messages = parse_messages(j, name, where);
  } else {
    fail(where, "\"" + name + "\" must be a string or a list of messages, got " + json_kind(j));
  }
  return t;
}

// A completion (chosen, rejected, ...) after a prompt: the same kind, and a conversation must
// give the assistant something to say.
void check_completion(const TextOrChat& prompt, const TextOrChat& c, const std::string& name,
                      const std::string& where) {
  if (prompt.is_chat != c.is_chat)
    fail(where, "\"prompt\" and \"" + name + "\" must both be strings or both be message lists");
  if (c.is_chat && !has_assistant(c.messages))
    fail(where, "\"" + name + "\" has no assistant message: nothing to train on");
}

}  // namespace

TextOrChat parse_generation_prompt(const json& row, const std::string& where) {
  if (!row.is_object()) fail(where, std::string("a prompt record must be an object, got ") + json_kind(row));
  if (has(row, "prompt")) return parse_text_or_chat(row["prompt"], "prompt", where);
  if (has(row, "messages")) return parse_text_or_chat(row["messages"], "messages", where);
  fail(where, "a prompt record needs \"prompt\" (a string or a list of messages) or \"messages\"");
}

const char* data_format_name(DataFormat f) { return enum_name<DataFormat>(kDataFormatNames, f); }

DataFormat detect_data_format(const json& row, const std::string& where) {
  if (!row.is_object()) fail(where, std::string("expected a JSON object, got ") + json_kind(row));
  if (has(row, "messages")) return DataFormat::messages;
  if (has(row, "chosen") || has(row, "rejected")) return DataFormat::preference;
  if (has(row, "prompt") && has(row, "completion"))
    return has(row, "reward")  ? DataFormat::rollout
           : has(row, "label") ? DataFormat::unpaired_preference
                               : DataFormat::prompt_completion;
  if (has(row, "text")) return DataFormat::text;
  fail(where,
       "cannot tell the record format: expected \"messages\", \"prompt\" + \"completion\" "
       "(+ \"reward\" or \"label\"), \"text\", or \"chosen\" + \"rejected\" (+ \"prompt\")");
}

Record parse_record(const json& row, DataFormat format, const std::string& where,
                    const std::string& detected_from) {
  if (!row.is_object()) fail(where, std::string("expected a JSON object, got ") + json_kind(row));
  Record r;
  r.format = format;
  const std::string fmt = data_format_name(format);
  switch (format) {
    case DataFormat::messages:
      r.messages =
          parse_messages(field(row, "messages", where, fmt, detected_from), "messages", where);
      if (!has_assistant(r.messages))
        fail(where, "\"messages\" has no assistant message: nothing to train on");
      break;
    case DataFormat::text: {
      const json& t = field(row, "text", where, fmt, detected_from);
      if (!t.is_string())
        fail(where, std::string("\"text\" must be a string, got ") + json_kind(t));
      r.text = t.get<std::string>();
      if (r.text.empty()) fail(where, "\"text\" is empty");
      break;
    }
    case DataFormat::prompt_completion:
    case DataFormat::unpaired_preference:
    case DataFormat::rollout: {
      r.prompt =
          parse_text_or_chat(field(row, "prompt", where, fmt, detected_from), "prompt", where);
      const json& c = field(row, "completion", where, fmt, detected_from);
      r.completion = parse_text_or_chat(c, "completion", where);
      check_completion(r.prompt, r.completion, "completion", where);
      if (format == DataFormat::rollout) {
        const json& reward = field(row, "reward", where, fmt, detected_from);
        if (!reward.is_number())
          fail(where, std::string("\"reward\" must be a number, got ") + json_kind(reward));
        r.reward = reward.get<double>();
        if (!std::isfinite(r.reward)) fail(where, "\"reward\" is not finite");
        // Rewards are normalised and used in fp32: one past float's range would be inf there.
        if (std::fabs(r.reward) > std::numeric_limits<float>::max())
          fail(where, "\"reward\" " + reward.dump() + " is outside fp32 range (|x| <= 3.4e38)");
        r.group_key = row["prompt"].dump();
      }
      if (format == DataFormat::unpaired_preference) {
        const json& label = field(row, "label", where, fmt, detected_from);
        if (!label.is_boolean())
          fail(where, std::string("\"label\" must be true or false, got ") + json_kind(label));
        r.label = label.get<bool>();
      }
      break;
    }
    case DataFormat::preference: {
      const json& chosen = field(row, "chosen", where, fmt, detected_from);
      const json& rejected = field(row, "rejected", where, fmt, detected_from);
      r.chosen = parse_text_or_chat(chosen, "chosen", where);
      r.rejected = parse_text_or_chat(rejected, "rejected", where);
      if (has(row, "prompt")) {
        r.prompt = parse_text_or_chat(row["prompt"], "prompt", where);
      } else {
        // Implicit prompt (TRL): the messages both conversations start with.
        if (!r.chosen.is_chat || !r.rejected.is_chat)
          fail(where,
               "missing field \"prompt\" (an implicit prompt needs \"chosen\" and "
               "\"rejected\" to be message lists)");
        size_t common = 0;
        auto same = [](const ChatMessage& a, const ChatMessage& b) {
          return a.role == b.role && a.content == b.content &&
                 a.reasoning_content == b.reasoning_content;
        };
        while (common < r.chosen.messages.size() && common < r.rejected.messages.size() &&
               same(r.chosen.messages[common], r.rejected.messages[common]))
          ++common;
        if (common == 0) fail(where, "\"chosen\" and \"rejected\" share no prompt messages");
        r.prompt.is_chat = true;
        r.prompt.messages.assign(r.chosen.messages.begin(), r.chosen.messages.begin() + common);
        r.chosen.messages.erase(r.chosen.messages.begin(), r.chosen.messages.begin() + common);
        r.rejected.messages.erase(r.rejected.messages.begin(),
                                  r.rejected.messages.begin() + common);
        if (r.chosen.messages.empty() || r.rejected.messages.empty())
          fail(where, "\"chosen\" and \"rejected\" are identical after their shared prompt");
      }
      check_completion(r.prompt, r.chosen, "chosen", where);
      check_completion(r.prompt, r.rejected, "rejected", where);
      break;
    }
  }
  return r;
}

}  // namespace sbp
