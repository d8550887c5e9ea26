#define PCRE2_CODE_UNIT_WIDTH 8
#include "reward/builtin_rewards.h"

#include <pcre2.h>

#include "reward/answer_match.h"

namespace sbp {

namespace {

class AccuracyReward : public RewardFunction {
 public:
  explicit AccuracyReward(std::string field) : field_(std::move(field)) {}

  std::vector<double> score(std::span<const RewardRequest> requests) override {
    std::vector<double> out;
    out.reserve(requests.size());
    for (const RewardRequest& r : requests) out.push_back(correct(r) ? 1.0 : 0.0);
    return out;
  }

 private:
  bool correct(const RewardRequest& r) const {
    if (!r.fields || !r.fields->is_object()) return false;
    const auto it = r.fields->find(field_);
    if (it == r.fields->end()) return false;
    // A numeric answer in the record (`"answer": 42`) compares as its JSON spelling.
    const std::string reference = it->is_string() ? it->get<std::string>() : it->dump();
    const std::optional<std::string> predicted = extract_final_answer(r.completion);
    return predicted && answers_match(*predicted, reference);
  }

  std::string field_;
};

class FormatReward : public RewardFunction {
 public:
  FormatReward(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOTALL | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      throw InputError(where + ": pattern does not compile at offset " + std::to_string(offset) +
                       ": " + reinterpret_cast<const char*>(buf));
    }
    match_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~FormatReward() override {
    pcre2_match_data_free(match_);
    pcre2_code_free(code_);
  }
  FormatReward(const FormatReward&) = delete;
  FormatReward& operator=(const FormatReward&) = delete;

  std::vector<double> score(std::span<const RewardRequest> requests) override {
    std::vector<double> out;
    out.reserve(requests.size());
    for (const RewardRequest& r : requests) {
      // A completion is sampled token by token and may end inside a UTF-8 sequence:
      // PCRE2_MATCH_INVALID_UTF (at compile time) lets such a text be searched, safely, where
      // plain UTF mode would refuse it.
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(r.completion.data()),
                                 r.completion.size(), 0, 0, match_, nullptr);
      out.push_back(rc >= 0 ? 1.0 : 0.0);
    }
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* match_ = nullptr;
};

class LengthReward : public RewardFunction {
 public:
  LengthReward(int64_t max_length, int64_t cache_length)
      : max_(max_length), cache_(cache_length) {}

  std::vector<double> score(std::span<const RewardRequest> requests) override {
    std::vector<double> out;
    out.reserve(requests.size());
    for (const RewardRequest& r : requests) {
      const int64_t len = r.completion_tokens;
      if (r.truncated || len > max_) {
        out.push_back(-1.0);
      } else if (len <= max_ - cache_) {
        out.push_back(0.0);
      } else {
        out.push_back(static_cast<double>(max_ - cache_ - len) / static_cast<double>(cache_));
      }
    }
    return out;
  }

 private:
  int64_t max_, cache_;
};

}  // namespace

std::unique_ptr<RewardFunction> make_accuracy_reward(std::string answer_field) {
  return std::make_unique<AccuracyReward>(std::move(answer_field));
}

std::unique_ptr<RewardFunction> make_format_reward(const std::string& pattern,
                                                   const std::string& where) {
  return std::make_unique<FormatReward>(pattern, where);
}

std::unique_ptr<RewardFunction> make_length_reward(int64_t max_length, int64_t cache_length) {
  return std::make_unique<LengthReward>(max_length, cache_length);
}

}  // namespace sbp
