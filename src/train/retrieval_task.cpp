#include "train/retrieval_task.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace sbp {

RetrievalTask::Sample RetrievalTask::sample(Rng& rng) const {
  const int64_t dict_len = 1 + num_pairs, query_len = 3 * num_queries;
  if (num_pairs > num_keys || num_pairs < 1 || dict_len + query_len > seq_len)
    throw InputError("retrieval task: sequence of " + std::to_string(seq_len) +
                     " tokens too short for " + std::to_string(num_pairs) + " pairs and " +
                     std::to_string(num_queries) + " queries");
  // Distinct keys for the dictionary, random values.
  std::vector<int64_t> keys(static_cast<size_t>(num_keys));
  std::iota(keys.begin(), keys.end(), 0);
  for (int64_t i = 0; i < num_pairs; ++i)
    std::swap(keys[static_cast<size_t>(i)],
              keys[static_cast<size_t>(i + static_cast<int64_t>(rng.below(num_keys - i)))]);
  std::vector<int64_t> values(static_cast<size_t>(num_pairs));
  for (auto& v : values) v = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_values)));

  Sample s;
  Batch& b = s.batch;
  b.tokens.reserve(static_cast<size_t>(seq_len));
  b.tokens.push_back(kBos);
  for (int64_t i = 0; i < num_pairs; ++i)
    b.tokens.push_back(record_id(keys[static_cast<size_t>(i)], values[static_cast<size_t>(i)]));
  while (static_cast<int64_t>(b.tokens.size()) < seq_len - query_len)
    b.tokens.push_back(
        filler_id(static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_filler)))));
  b.loss_mask.assign(b.tokens.size(), 0.0f);
  std::vector<bool> asked(static_cast<size_t>(num_pairs), false);
  for (int64_t q = 0; q < num_queries; ++q) {
    const size_t i = static_cast<size_t>(rng.below(static_cast<uint64_t>(num_pairs)));
    b.tokens.push_back(kQuery);
    b.tokens.push_back(key_id(keys[i]));
    b.tokens.push_back(value_id(values[i]));
    b.loss_mask.insert(b.loss_mask.end(), {0.0f, 0.0f, 1.0f});
    const int64_t row = static_cast<int64_t>(b.tokens.size()) - 2;  // the key predicts the value
    s.scored_rows.push_back(row);
    if (!asked[i]) s.first_rows.push_back(row);
    asked[i] = true;
  }
  b.seq_lens = {static_cast<int64_t>(b.tokens.size())};
  return s;
}

int64_t RetrievalTask::min_retrieval_distance() const {
  return seq_len - 3 * num_queries - (1 + num_pairs);
}

}  // namespace sbp
