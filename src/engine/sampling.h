#pragma once
// Choosing the next token from one row of logits (generation, online GRPO/PPO rollouts).
//
// Greedy: the first largest logit (argmax_rows' rule). Sampling, in transformers' order:
// softmax(logits / temperature); keep the top_k most likely tokens (0 = all); keep the
// smallest set of most likely tokens whose probability reaches top_p (1 = all); drop tokens
// below min_p times the most likely one's probability (0 = none); renormalise and draw with
// one uniform number from the sequence's own Rng. Ties between equal probabilities are broken
// by token id, so a draw depends only on the logits and the Rng state: reproducible across
// runs, thread counts and batch compositions.
#include <cstdint>
#include <span>
#include <string>

#include "core/rng.h"

namespace sbp {

struct SamplingParams {
  bool greedy = false;
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // >= 0; 0 = no limit
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1)

  // Throws InputError naming `where` and the field when a value is out of range.
  void validate(const std::string& where) const;
};

// The next token for logits (V). Sampling consumes exactly one rng.uniform(); greedy none.
int32_t choose_token(std::span<const float> logits, const SamplingParams& p, Rng& rng);

// log softmax(logits)[id] of the unscaled, unfiltered logits, in fp64: the model's own
// log-probability of the token, as `streambp score` reports it.
double token_logprob(std::span<const float> logits, int32_t id);

}  // namespace sbp
