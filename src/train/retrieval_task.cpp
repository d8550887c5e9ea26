#include "train/retrieval_task.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace sbp {

Batch RetrievalTask::sample(Rng& rng) const {
  const int64_t dict_len = 1 + 2 * num_pairs, query_len = 3 * num_pairs;
  if (num_pairs > num_keys || dict_len + query_len > seq_len)
    throw InputError("retrieval task: sequence too short for the dictionary and queries");
  // Distinct keys for the dictionary.
  std::vector<int64_t> keys(static_cast<size_t>(num_keys));
  std::iota(keys.begin(), keys.end(), 0);
  for (int64_t i = 0; i < num_pairs; ++i)
    std::swap(keys[static_cast<size_t>(i)],
              keys[static_cast<size_t>(i + static_cast<int64_t>(rng.below(num_keys - i)))]);
  std::vector<int64_t> values(static_cast<size_t>(num_pairs));
  for (auto& v : values) v = static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_values)));

  Batch b;
  b.tokens.reserve(static_cast<size_t>(seq_len));
  b.tokens.push_back(kBos);
  for (int64_t i = 0; i < num_pairs; ++i) {
    b.tokens.push_back(key_id(keys[static_cast<size_t>(i)]));
    b.tokens.push_back(value_id(values[static_cast<size_t>(i)]));
  }
  while (static_cast<int64_t>(b.tokens.size()) < seq_len - query_len)
    b.tokens.push_back(filler_id(static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_filler)))));
  b.loss_mask.assign(b.tokens.size(), 0.0f);
  // Queries in a random order, each key once.
  std::vector<int64_t> order(static_cast<size_t>(num_pairs));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = num_pairs - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.below(i + 1))]);
  for (int64_t i : order) {
    b.tokens.push_back(kQuery);
    b.tokens.push_back(key_id(keys[static_cast<size_t>(i)]));
    b.tokens.push_back(value_id(values[static_cast<size_t>(i)]));
    b.loss_mask.insert(b.loss_mask.end(), {0.0f, 0.0f, 1.0f});
  }
  b.seq_lens = {static_cast<int64_t>(b.tokens.size())};
  return b;
}

std::vector<int64_t> RetrievalTask::scored_rows(const Batch& b) const {
  std::vector<int64_t> rows;
  for (size_t t = 1; t < b.loss_mask.size(); ++t)
    if (b.loss_mask[t] > 0.0f) rows.push_back(static_cast<int64_t>(t) - 1);
  return rows;
}

double RetrievalTask::mean_retrieval_distance() const {
  // Query i (0-based, at the end) retrieves a uniformly random dictionary entry.
  const double dict_mid = 1.0 + static_cast<double>(num_pairs);
  const double query_mid = static_cast<double>(seq_len) - 1.5 * static_cast<double>(num_pairs);
  return query_mid - dict_mid;
}

}  // namespace sbp
