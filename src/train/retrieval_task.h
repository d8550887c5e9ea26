#pragma once
// The built-in demo task: long-range key -> value retrieval. A sequence opens with a
// dictionary of key/value pairs, continues with thousands of filler tokens, and ends with
// queries "? key value" whose value tokens are the only scored targets. Answering needs the
// dictionary at the start: nothing near the query says what the value is.
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "engine/batch.h"

namespace sbp {

struct RetrievalTask {
  int64_t seq_len = 4096;
  int64_t num_pairs = 32;    // dictionary entries (and queries: each key asked once)
  int64_t num_keys = 64;     // key alphabet
  int64_t num_values = 32;   // value alphabet (chance accuracy = 1 / num_values)
  int64_t num_filler = 24;   // filler alphabet

  // Token ids: 0 BOS, 1 query marker, then keys, values, filler.
  static constexpr int32_t kBos = 0;
  static constexpr int32_t kQuery = 1;
  int32_t key_id(int64_t k) const { return static_cast<int32_t>(2 + k); }
  int32_t value_id(int64_t v) const { return static_cast<int32_t>(2 + num_keys + v); }
  int32_t filler_id(int64_t f) const {
    return static_cast<int32_t>(2 + num_keys + num_values + f);
  }
  int64_t vocab_size() const { return 2 + num_keys + num_values + num_filler; }

  // One sequence of seq_len tokens with its loss mask (1 on the queried value tokens).
  Batch sample(Rng& rng) const;
  // The rows whose prediction is scored (the query keys, predicting the value after them).
  std::vector<int64_t> scored_rows(const Batch& b) const;
  // Distance in tokens from a query to the dictionary entry it must retrieve, averaged.
  double mean_retrieval_distance() const;
};

}  // namespace sbp
