#pragma once
// What one generation asks for and what it returns (Engine::generate, generate.cpp).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampling.h"

namespace sbp {

enum class FinishReason { stop, length };
const char* finish_reason_name(FinishReason r);  // "stop" | "length"

struct GenerationConfig {
  int64_t max_new_tokens = 64;  // >= 1
  SamplingParams sampling;
  // Tokens that end the completion (eos, the chat template's end of turn); the stop token is
  // kept as the completion's last token, as the trainer needs it to learn to stop.
  std::vector<int32_t> stop_ids;
  // Called after each new token with the completion so far; true ends it (stop strings).
  std::function<bool(std::span<const int32_t>)> stop_after;
};

struct Generated {
  std::vector<int32_t> ids;      // (n) the completion's tokens
  std::vector<float> logprobs;   // (n) log p(token | prefix) of the unscaled, unfiltered model
  FinishReason finish = FinishReason::length;
};

}  // namespace sbp
