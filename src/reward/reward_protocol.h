#pragma once
// The answer side of the `command` reward's line protocol (reward/command_reward.h), apart from
// the process handling so that it can be tested and fuzzed alone: one line a reward program
// wrote back, to a reward or the reason it is refused.
#include <string>

namespace sbp {

struct RewardAnswer {
  double reward = 0.0;
  std::string error;  // "" when `reward` holds the answer; else why the line is refused, worded
                      // to follow the program's name ("answered a line that is not JSON")
};

// `line` without its '\n'. Accepts exactly a JSON object with a finite number "reward" (other
// keys are ignored); JSON nested deeper than core/untrusted_json.h's limit is refused.
RewardAnswer parse_reward_answer(const std::string& line);

}  // namespace sbp
