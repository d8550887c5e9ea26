// The rows a rank of a context group owns (engine/context_slice.h): every row exactly once,
// local rows one after the other, and causal attention's work balanced across ranks.
#include "engine/context_slice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace sbp {
namespace {

TEST(ContextSlice, EveryRowOnceAndLocalRowsContiguous) {
  for (int C : {1, 2, 3, 4, 8})
    for (int64_t T : {0, 1, 5, 7, 64, 1000, 4097}) {
      std::vector<int> owner(static_cast<size_t>(T), -1);
      for (int r = 0; r < C; ++r) {
        const ContextSlice cs(T, C, r);
        int64_t local = 0;
        for (const RowPiece& p : cs.mine()) {
          EXPECT_EQ(p.owner, r);
          EXPECT_EQ(p.local, local) << "C " << C << " T " << T;
          local += p.size();
          for (int64_t t = p.begin; t < p.end; ++t) {
            EXPECT_EQ(owner[static_cast<size_t>(t)], -1) << "row " << t << " owned twice";
            owner[static_cast<size_t>(t)] = r;
          }
        }
        EXPECT_EQ(local, cs.local_rows());
      }
      for (int64_t t = 0; t < T; ++t) EXPECT_GE(owner[static_cast<size_t>(t)], 0) << "row " << t;
    }
}

TEST(ContextSlice, RankOwnsAnEarlyAndTheMatchingLatePiece) {
  const ContextSlice cs(800, 4, 1);  // pieces of 100 rows: rank 1 owns pieces 1 and 6
  ASSERT_EQ(cs.mine().size(), 2u);
  EXPECT_EQ(cs.mine()[0].begin, 100);
  EXPECT_EQ(cs.mine()[0].end, 200);
  EXPECT_EQ(cs.mine()[1].begin, 600);
  EXPECT_EQ(cs.mine()[1].local, 100);
  const ContextSlice one(800, 1, 0);
  ASSERT_EQ(one.mine().size(), 1u);
  EXPECT_EQ(one.mine()[0].end, 800);
}

// Per-rank attention work of one long sequence: equal to 0.1% at cp 2, 4 and 8 (the bar: 10%).
TEST(ContextSlice, AttentionWorkWithinTenPercentAtCp4) {
  for (int C : {2, 4, 8}) {
    const int64_t T = 131072;
    const std::vector<int64_t> one_segment{T};
    const std::vector<int64_t> w = attention_work(ContextSlice(T, C, 0), one_segment);
    const auto [lo, hi] = std::minmax_element(w.begin(), w.end());
    EXPECT_LE(static_cast<double>(*hi) / static_cast<double>(*lo), 1.001) << "C " << C;
    // A contiguous split would leave the last rank 2C - 1 times the first's work.
  }
  // Packed streams are not balanced by this split: with segments starting at rows 20000,
  // 21000 and 50000 of 65536 the busiest rank at cp 4 has 2.1x the least busy one's work
  // (docs/DISTRIBUTED.md, "Limits").
}

// The closed form against counting row by row: packed segments, with and without a window.
TEST(ContextSlice, AttentionWorkCountsEveryQueryKeyPair) {
  const std::vector<int64_t> lens{7, 1, 30, 12, 50};  // T = 100
  for (int C : {1, 2, 3})
    for (int64_t window : {0, 1, 5, 40}) {
      const ContextSlice cs(100, C, 0);
      std::vector<int64_t> want(static_cast<size_t>(C), 0);
      int64_t start = 0;
      for (int64_t len : lens) {
        for (int64_t t = start; t < start + len; ++t) {
          int64_t keys = t - start + 1;
          if (window > 0) keys = std::min(keys, window);
          for (const RowPiece& p : cs.pieces())
            if (t >= p.begin && t < p.end) want[static_cast<size_t>(p.owner)] += keys;
        }
        start += len;
      }
      EXPECT_EQ(attention_work(cs, lens, window), want) << "C " << C << " window " << window;
    }
}

}  // namespace
}  // namespace sbp
