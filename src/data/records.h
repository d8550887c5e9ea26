#pragma once
// One JSONL record in one of TRL's dataset schemas, parsed and validated (no tokens yet).
//
//   messages           {"messages": [{"role", "content"}, ...]}                       SFT
//   prompt_completion  {"prompt": P, "completion": C}                                 SFT
//   text               {"text": "..."}                                                SFT
//   preference         {"prompt": P, "chosen": C, "rejected": R}, or implicit prompt:
//                      {"chosen": [...], "rejected": [...]} sharing their first messages  DPO
//   rollout            {"prompt": P, "completion": C, "reward": number}, grouped by P  GRPO/PPO
//   unpaired_preference {"prompt": P, "completion": C, "label": true|false}          KTO
//
// P, C, R are strings or lists of messages (both sides of a record the same kind). A message is
// {"role": system|user|assistant|tool, "content": string} with optional "reasoning_content"
// (string or null, assistant only). Other keys of a record or message are ignored (ids, names),
// except "tool_calls", which the chat templates here cannot render.
// Errors are InputErrors prefixed by `where` ("file:line") naming the field.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "data/chat_template.h"

namespace sbp {

enum class DataFormat {
  messages,
  prompt_completion,
  text,
  preference,
  rollout,
  unpaired_preference
};

inline constexpr EnumName<DataFormat> kDataFormatNames[] = {
    {DataFormat::messages, "messages"},
    {DataFormat::prompt_completion, "prompt_completion"},
    {DataFormat::text, "text"},
    {DataFormat::preference, "preference"},
    {DataFormat::rollout, "rollout"},
    {DataFormat::unpaired_preference, "unpaired_preference"}};
const char* data_format_name(DataFormat f);

// A prompt or completion: plain text or a conversation.
struct TextOrChat {
  bool is_chat = false;
  std::string text;
  std::vector<ChatMessage> messages;
};

struct Record {
  DataFormat format = DataFormat::messages;
  std::vector<ChatMessage> messages;  // messages
  std::string text;                   // text
  TextOrChat prompt, completion;      // prompt_completion, rollout; prompt of preference
  TextOrChat chosen, rejected;        // preference (completions after the prompt)
  double reward = 0.0;                // rollout
  bool label = false;                 // unpaired_preference: desirable
  std::string group_key;              // rollout: the prompt as canonical JSON
};

// The schema a record's keys announce (see the table above). Throws if none matches.
DataFormat detect_data_format(const nlohmann::json& row, const std::string& where);

// Validates `row` against `format`; `detected_from` ("line 1") explains where the file's format
// came from in "missing field" errors.
Record parse_record(const nlohmann::json& row, DataFormat format, const std::string& where,
                    const std::string& detected_from);

// The prompt of a prompt record for generation (online GRPO/PPO, `streambp generate`): its
// "prompt" (a string or a list of messages) or else its "messages". Throws InputError prefixed by
// `where` naming the field.
TextOrChat parse_generation_prompt(const nlohmann::json& row, const std::string& where);

}  // namespace sbp
