#include "data/packing.h"

#include <numeric>

#include "core/error.h"

namespace sbp {

std::vector<int64_t> identity_order(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, Rng& rng) {
  std::vector<int64_t> order = identity_order(n);
  if (shuffle) {
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  return order;
}

std::vector<MicroBatchPlan> pack_examples(std::span<const Example> examples,
                                          std::span<const int64_t> order, int64_t max_tokens) {
  std::vector<MicroBatchPlan> plans;
  MicroBatchPlan cur;
  for (const int64_t idx : order) {
    const int64_t n = examples[static_cast<size_t>(idx)].tokens();
    if (n > max_tokens) {
      throw InputError("example from line " +
                       std::to_string(examples[static_cast<size_t>(idx)].lines.front()) + " has " +
                       std::to_string(n) + " tokens, more than max_tokens " +
                       std::to_string(max_tokens));
    }
    if (!cur.examples.empty() && cur.tokens + n > max_tokens) {
      plans.push_back(std::move(cur));
      cur = MicroBatchPlan{};
    }
    cur.examples.push_back(idx);
    cur.tokens += n;
  }
  if (!cur.examples.empty()) plans.push_back(std::move(cur));
  return plans;
}

int64_t PackedBatch::loss_tokens() const {
  int64_t n = 0;
  for (float w : batch.target_weights()) n += w > 0.0f;
  return n;
}

PackedBatch assemble_batch(std::span<const Example> examples, const MicroBatchPlan& plan) {
  PackedBatch p;
  p.batch.tokens.reserve(static_cast<size_t>(plan.tokens));
  p.batch.loss_mask.reserve(static_cast<size_t>(plan.tokens));
  for (const int64_t idx : plan.examples) {
    const Example& e = examples[static_cast<size_t>(idx)];
    for (size_t s = 0; s < e.sequences.size(); ++s) {
      const TokenizedSequence& seq = e.sequences[s];
      p.batch.tokens.insert(p.batch.tokens.end(), seq.ids.begin(), seq.ids.end());
      p.batch.loss_mask.insert(p.batch.loss_mask.end(), seq.mask.begin(), seq.mask.end());
      p.batch.seq_lens.push_back(seq.size());
      p.segment_example.push_back(idx);
      p.segment_reward.push_back(e.rewards.empty() ? 0.0 : e.rewards[s]);
    }
  }
  return p;
}

}  // namespace sbp
