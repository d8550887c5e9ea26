#pragma once
// Reward functions for online GRPO/PPO (docs/REWARDS.md): each scores a batch of completions,
// one finite number per completion. A RewardSet sums several with weights and keeps each
// function's own scores for the metrics.
//
// Built-in types:
//   accuracy  1 if the completion's final answer matches the record's `answer_field`
//             (reward/answer_match.h gives the rules), else 0; 0 when the record has no answer.
//   format    1 if the completion matches `pattern` (PCRE2, UTF, `.` matches newlines; the match
//             may start anywhere: anchor with ^ and $ to demand the whole completion), else 0.
//   length    DAPO's soft overlong penalty on the completion's token count L, with
//             max = max_length and c = cache_length: 0 for L <= max - c, (max - c - L) / c for
//             max - c < L <= max, -1 beyond max (a completion cut at max_completion_length
//             counts as beyond when `truncated` is set).
//   command   an external program (reward/command_reward.h).
//   python    a function of the program that embeds the trainer (the Python package's
//             streambp.train(reward_funcs=...), python/src/): `function` below, called in this
//             process. A config file cannot give one; it is named there only as a record.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"
#include "core/error.h"

namespace sbp {

// A reward function could not score (a reward program crashed, timed out or answered
// garbage): the run stops with this message, after saving a checkpoint.
class RewardError : public Error {
 public:
  using Error::Error;
};

// SIGINT/SIGTERM arrived while a reward was pending (core/stop_signal.h): the reward was
// abandoned (its program killed) and the trainer takes its stop path, checkpoint and exit 130,
// as after a step. Not a RewardError: nothing failed.
class RewardInterrupted : public Error {
 public:
  using Error::Error;
};

struct RewardRequest {
  std::string prompt;      // the prompt as the policy saw it (rendered chat template included)
  std::string completion;  // the sampled completion, decoded, special tokens removed
  int64_t completion_tokens = 0;
  bool truncated = false;  // stopped by max_completion_length, not by eos / a stop string
  // The prompt record's other fields (answer, solution, test cases, ...): an object, or null.
  const nlohmann::json* fields = nullptr;
};

class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  // One finite reward per request. Throws RewardError when it cannot.
  virtual std::vector<double> score(std::span<const RewardRequest> requests) = 0;
  // The run's last score() is done. A function that holds a program checks that it wrote
  // nothing it was not asked for, to its end (RewardError if it did), and ends it.
  virtual void finish() {}
};

// The reward types, spelled as in a config file: the one list of them.
enum class RewardType { accuracy, format, length, command, python };
inline constexpr EnumName<RewardType> kRewardTypeNames[] = {{RewardType::accuracy, "accuracy"},
                                                            {RewardType::format, "format"},
                                                            {RewardType::length, "length"},
                                                            {RewardType::command, "command"},
                                                            {RewardType::python, "python"}};
std::string reward_type_list();  // "accuracy, format, length, command, python"
// The type spelled `name`, parsed where a spec is read; InputError "<where>: unknown reward type
// '<name>' (known: ...)" otherwise.
RewardType parse_reward_type(const std::string& name, const std::string& where);
const char* reward_type_name(RewardType type);  // its kRewardTypeNames spelling

struct RewardSpec {
  RewardType type = RewardType::accuracy;
  std::string name;  // the metric's name (reward/<name>); empty: the type
  double weight = 1.0;
  std::string answer_field = "answer";  // accuracy
  std::string pattern;                  // format
  int64_t max_length = 0;               // length
  int64_t cache_length = 0;             // length
  std::vector<std::string> command;     // command: program and arguments (PATH is searched)
  double timeout_s = 60.0;              // command, python: seconds for one answer
  // python: the embedding program's function (shared: a config is copied, the function is one).
  std::shared_ptr<RewardFunction> function;
};

// Throws InputError naming `where` (e.g. "config.yaml: rewards[1]") and the field when a spec
// is invalid: non-finite weight, a pattern that does not compile, max_length < 1
// or cache_length outside [1, max_length], an empty command, timeout_s not in (0, 86400], a
// python reward without its function (one named in a config file).
std::unique_ptr<RewardFunction> make_reward(const RewardSpec& spec, const std::string& where);

// The spec as a config file writes it: type, name, weight and its type's own fields.
nlohmann::json reward_spec_json(const RewardSpec& spec);

class RewardSet {
 public:
  // Names must be unique (a type used twice needs `name`). Throws InputError like make_reward.
  RewardSet(std::vector<RewardSpec> specs, const std::string& where);

  struct Scores {
    std::vector<double> total;                    // (n) sum of weight * reward
    std::vector<std::vector<double>> per_reward;  // (R, n) each function's unweighted rewards
  };
  Scores score(std::span<const RewardRequest> requests);
  // After the run's last score(): every function's finish(), in order (RewardError).
  void finish();

  size_t size() const { return specs_.size(); }
  const std::string& name(size_t i) const { return specs_[i].name; }
  double weight(size_t i) const { return specs_[i].weight; }

 private:
  std::vector<RewardSpec> specs_;
  std::vector<std::unique_ptr<RewardFunction>> functions_;
};

}  // namespace sbp
