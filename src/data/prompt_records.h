#pragma once
// Prompt records (JSONL, one object per line) for generation and online GRPO/PPO:
//   {"prompt": "text" | [messages], ...other fields}
//   {"messages": [messages], ...}
//   {"prompt_ids": [ids], ...}                        token ids, no tokenizer needed
// The prompt becomes the ids the policy continues (data/prompt_encoder.h); every other field
// (answer, solution, test cases, ...) is kept for the reward functions (reward/reward.h).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_source.h"
#include "data/prompt_encoder.h"

namespace sbp {

struct PromptRecord {
  std::vector<int32_t> ids;  // (P) the prompt's tokens, chat template and generation prompt in
  std::string text;          // the prompt as the policy sees it (special tokens kept); "" when
                             // there is no tokenizer
  nlohmann::json fields;     // the record's other fields: an object
  std::string where;         // "prompts.jsonl:3"
};

// Reads every record of `source` (a file, or its lines in memory). `enc` may be null: then only prompt_ids records are accepted.
// Ids must lie in [0, vocab). Throws InputError naming file:line and the field; an empty file
// is an error.
std::vector<PromptRecord> read_prompt_records(const DataSource& source, const PromptEncoder* enc,
                                              int64_t vocab);

// True when a training data file holds prompt records rather than rollouts or SFT/DPO records:
// its first non-blank line is an object with "prompt" or "prompt_ids" and none of "completion",
// "chosen", "rejected", "reward". Unreadable or unparsable lines give false (the dataset loader
// reports them).
bool looks_like_prompt_records(const DataSource& source);

}  // namespace sbp
