#include "reward/reward_protocol.h"

#include <cmath>

#include "core/error.h"
#include "core/untrusted_json.h"

namespace sbp {

RewardAnswer parse_reward_answer(const std::string& line) {
  RewardAnswer a;
  nlohmann::json answer;
  try {
    answer = parse_untrusted_json(line, "");
  } catch (const InputError&) {
    a.error = "answered JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return a;
  } catch (const nlohmann::json::exception&) {  // also out_of_range: 1e999
    a.error = "answered a line that is not JSON";
    return a;
  }
  const auto it = answer.is_object() ? answer.find("reward") : answer.end();
  if (it == answer.end() || !it->is_number()) {
    a.error = "answered without a numeric \"reward\"";
    return a;
  }
  a.reward = it->get<double>();
  if (!std::isfinite(a.reward)) a.error = "answered a non-finite reward";
  return a;
}

}  // namespace sbp
