#include "train/long_eval.h"

#include <algorithm>

#include "core/error.h"
#include "train/passkey_task.h"

namespace sbp {

std::vector<PasskeyCell> run_passkey(const ScoreFn& score, const Tokenizer& tok,
                                     std::optional<int32_t> bos, const std::vector<int32_t>& filler,
                                     const PasskeyOptions& o,
                                     const std::function<void(const PasskeyCell&)>& after_cell) {
  if (o.trials < 1) throw InputError("passkey: trials must be at least 1");
  std::vector<PasskeyCell> cells;
  for (int64_t L : o.lengths) {
    for (size_t di = 0; di < o.depths.size(); ++di) {
      PasskeyCell cell;
      cell.length = L;
      cell.depth = o.depths[di];
      double logp_sum = 0.0;
      for (int64_t trial = 0; trial < o.trials; ++trial) {
        const std::string key = passkey_for(o.seed, L, static_cast<int64_t>(di), trial);
        const PasskeySample s = make_passkey_sample(tok, bos, filler, L, cell.depth, key);
        Batch b;
        b.tokens = s.tokens;
        b.seq_lens = {static_cast<int64_t>(s.tokens.size())};
        const SequenceScores r = score(b);
        // Rows answer_begin - 1 .. T - 2 predict the key's tokens.
        const int64_t T = static_cast<int64_t>(s.tokens.size());
        double lp = 0.0;
        bool all = true;
        for (int64_t row = s.answer_begin - 1; row + 1 < T; ++row) {
          lp += r.logp[static_cast<size_t>(row)];
          all = all && r.argmax[static_cast<size_t>(row)] == s.tokens[static_cast<size_t>(row + 1)];
        }
        logp_sum += lp;
        cell.found += all ? 1 : 0;
        cell.key_tokens = T - s.answer_begin;
      }
      cell.trials = o.trials;
      cell.key_logp = logp_sum / static_cast<double>(o.trials);
      cells.push_back(cell);
      if (after_cell) after_cell(cell);
    }
  }
  return cells;
}

std::vector<PositionBucket> perplexity_by_position(const ScoreFn& score,
                                                   const std::vector<std::vector<int32_t>>& docs,
                                                   int64_t bucket_size) {
  if (bucket_size < 1) throw InputError("perplexity: the bucket size must be at least 1");
  std::vector<PositionBucket> buckets;
  for (const std::vector<int32_t>& d : docs) {
    const int64_t T = static_cast<int64_t>(d.size());
    if (T < 2) continue;  // nothing predicted
    Batch b;
    b.tokens = d;
    b.seq_lens = {T};
    const SequenceScores r = score(b);
    const int64_t need = (T - 1) / bucket_size + 1;  // the last predicted position is T - 1
    while (static_cast<int64_t>(buckets.size()) < need) {
      const int64_t i = static_cast<int64_t>(buckets.size());
      buckets.push_back({i * bucket_size, (i + 1) * bucket_size, 0, 0.0});
    }
    for (int64_t t = 1; t < T; ++t) {
      PositionBucket& k = buckets[static_cast<size_t>(t / bucket_size)];
      k.tokens += 1;
      k.nll_sum -= static_cast<double>(r.logp[static_cast<size_t>(t - 1)]);
    }
  }
  return buckets;
}

}  // namespace sbp
