// reward/reward_protocol.h: a reward program's answer line to a reward or a reason.
#include "reward/reward_protocol.h"

#include <gtest/gtest.h>

namespace sbp {
namespace {

TEST(RewardProtocol, Answers) {
  EXPECT_EQ(parse_reward_answer("{\"reward\": 0.5}").reward, 0.5);
  EXPECT_EQ(parse_reward_answer("{\"reward\": -2, \"why\": [1]}").error, "");
  EXPECT_EQ(parse_reward_answer("reward = 1").error, "answered a line that is not JSON");
  EXPECT_EQ(parse_reward_answer("{\"reward\": 1e999}").error, "answered a line that is not JSON");
  EXPECT_EQ(parse_reward_answer("{\"score\": 1}").error, "answered without a numeric \"reward\"");
  EXPECT_EQ(parse_reward_answer("[1]").error, "answered without a numeric \"reward\"");
  EXPECT_EQ(parse_reward_answer("{\"reward\": \"1\"}").error,
            "answered without a numeric \"reward\"");
  const std::string deep =
      "{\"reward\": 1, \"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(parse_reward_answer(deep).error, "answered JSON nested deeper than 256 levels");
}

}  // namespace
}  // namespace sbp
