#pragma once
// The built-in demo task: long-range key -> value retrieval. A sequence opens with a
// dictionary of records, one token per (key, value) pair ("key=value"), continues with
// thousands of filler tokens, and ends with a section of queries "? key value" whose value
// tokens are the scored targets. The first query of each key can only be answered from the
// dictionary thousands of tokens back; later queries of the same key could also copy from the
// earlier query, so the demo reports accuracy on first queries ("long-range") separately.
// One record token per pair makes the task solvable by one attention hop (query key ->
// record), which a small model discovers within a couple of hundred steps on two cores.
#include <cstdint>
#include <vector>

#include "core/batch.h"
#include "core/rng.h"

namespace sbp {

struct RetrievalTask {
  int64_t seq_len = 4096;
  int64_t num_pairs = 8;     // dictionary records (distinct keys)
  int64_t num_queries = 96;  // queries at the end (keys drawn from the dictionary)
  int64_t num_keys = 8;      // key alphabet
  int64_t num_values = 8;    // value alphabet (chance accuracy = 1 / num_values)
  int64_t num_filler = 32;   // filler alphabet

  // Token ids: 0 BOS, 1 query marker, then keys, values, records (key-major), filler.
  static constexpr int32_t kBos = 0;
  static constexpr int32_t kQuery = 1;
  int32_t key_id(int64_t k) const { return static_cast<int32_t>(2 + k); }
  int32_t value_id(int64_t v) const { return static_cast<int32_t>(2 + num_keys + v); }
  int32_t record_id(int64_t k, int64_t v) const {
    return static_cast<int32_t>(2 + num_keys + num_values + k * num_values + v);
  }
  int32_t filler_id(int64_t f) const {
    return static_cast<int32_t>(2 + num_keys + num_values + num_keys * num_values + f);
  }
  int64_t vocab_size() const {
    return 2 + num_keys + num_values + num_keys * num_values + num_filler;
  }

  struct Sample {
    Batch batch;                       // one sequence, loss mask on the queried values
    std::vector<int64_t> scored_rows;  // rows predicting a queried value
    std::vector<int64_t> first_rows;   // the subset asking a key for the first time
  };
  Sample sample(Rng& rng) const;
  // Tokens between the dictionary and the first query: the shortest long-range distance.
  int64_t min_retrieval_distance() const;
};

}  // namespace sbp
