#pragma once
// streambp eval (issue 52): long-context evaluation on the streamed forward. Every sample is
// scored alone by `score` (Engine::score in the run's mode: in stream mode the memory of one
// chunk of rows, whatever the length), so lengths a full forward cannot hold still run.
//
// Passkey retrieval (train/passkey_task.h), per (length, depth) cell:
//   key_logp: the summed log-probability of the key's tokens after the question;
//   found:    greedy decoding would write the key: each key token is the most likely next token
//             given the ones before it. That is what greedy generation produces, token by token,
//             computed from the one teacher-forced forward instead of a decoding loop.
// Perplexity by position: documents scored alone, the negative log-likelihood of each target
// token bucketed by its position in the document (bucket b: positions [b B, (b + 1) B)).
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/batch.h"
#include "data/tokenizer.h"

namespace sbp {

// One sequence's per-row target log-probs and argmax (Engine::TokenScores' fields).
struct SequenceScores {
  std::vector<float> logp;      // (T) row t: log p(token t+1 | tokens <= t); 0 for the last row
  std::vector<int32_t> argmax;  // (T) row t: the most likely token t+1
};
using ScoreFn = std::function<SequenceScores(const Batch&)>;

struct PasskeyOptions {
  std::vector<int64_t> lengths;  // tokens per sample
  std::vector<double> depths;    // in [0, 1]: where the key sits in the filler
  int64_t trials = 1;            // samples per cell, each with its own key
  uint64_t seed = 0;
};

struct PasskeyCell {
  int64_t length = 0;
  double depth = 0.0;
  int64_t trials = 0;
  int64_t found = 0;       // trials whose key greedy decoding writes
  double key_logp = 0.0;   // mean over the trials of the key's summed log-prob
  int64_t key_tokens = 0;  // tokens of the last trial's key
};

// Cells in order: every depth of the first length, then the next length. `after_cell` (may be
// empty) is called after each, for progress and memory readings.
std::vector<PasskeyCell> run_passkey(const ScoreFn& score, const Tokenizer& tok,
                                     std::optional<int32_t> bos, const std::vector<int32_t>& filler,
                                     const PasskeyOptions& o,
                                     const std::function<void(const PasskeyCell&)>& after_cell);

struct PositionBucket {
  int64_t begin = 0, end = 0;  // positions [begin, end) of the predicted tokens
  int64_t tokens = 0;
  double nll_sum = 0.0;
  double mean_nll() const { return tokens > 0 ? nll_sum / static_cast<double>(tokens) : 0.0; }
};

// Each document scored alone; the prediction of token t (row t - 1) lands in bucket
// t / bucket_size. Buckets run to the longest document; empty ones have tokens = 0.
std::vector<PositionBucket> perplexity_by_position(const ScoreFn& score,
                                                   const std::vector<std::vector<int32_t>>& docs,
                                                   int64_t bucket_size);

}  // namespace sbp
