// Packing examples into micro-batches: the token budget holds, every example lands exactly once
// and whole, and packed examples never see each other (each scores exactly as it does alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "data/packing.h"
#include "engine/engine.h"
#include "support/test_support.h"

namespace sbp {
namespace {

// An example of `n` sequences with the given lengths; ids are arbitrary but distinct per example.
Example make_example(std::vector<int64_t> lens, int32_t base, int64_t vocab) {
  Example e;
  for (int64_t len : lens) {
    TokenizedSequence s;
    for (int64_t t = 0; t < len; ++t) {
      s.ids.push_back(static_cast<int32_t>((base * 31 + t * 7) % vocab));
      s.mask.push_back(t >= len / 2 ? 1.0f : 0.0f);
    }
    e.sequences.push_back(std::move(s));
    e.rewards.push_back(static_cast<double>(base));
    e.lines.push_back(base);
  }
  return e;
}

TEST(Packing, RespectsTheBudgetAndPlacesEveryExampleOnceAndWhole) {
  std::vector<Example> ex;
  Rng rng(3, "lens");
  for (int i = 0; i < 60; ++i) {
    const int64_t parts = 1 + static_cast<int64_t>(rng.below(3));  // pairs and groups stay whole
    std::vector<int64_t> lens;
    for (int64_t p = 0; p < parts; ++p) lens.push_back(2 + static_cast<int64_t>(rng.below(40)));
    ex.push_back(make_example(lens, i, 97));
  }
  Rng order_rng(7, "order");
  const std::vector<int64_t> order = epoch_order(static_cast<int64_t>(ex.size()), true, order_rng);
  const int64_t budget = 128;
  const std::vector<MicroBatchPlan> plans = pack_examples(ex, order, budget);
  std::vector<int64_t> seen;
  for (const MicroBatchPlan& p : plans) {
    EXPECT_LE(p.tokens, budget);
    const PackedBatch b = assemble_batch(ex, p);
    b.batch.validate(97, "packed");
    EXPECT_EQ(b.batch.size(), p.tokens);
    size_t seg = 0;
    for (int64_t idx : p.examples) {
      seen.push_back(idx);
      for (const TokenizedSequence& s : ex[static_cast<size_t>(idx)].sequences) {
        ASSERT_LT(seg, b.batch.seq_lens.size());
        EXPECT_EQ(b.batch.seq_lens[seg], s.size());  // one segment per sequence
        EXPECT_EQ(b.segment_example[seg], idx);
        ++seg;
      }
    }
    EXPECT_EQ(seg, b.batch.seq_lens.size());
    // Positions restart and targets stop at every segment boundary.
    const std::vector<int32_t> pos = b.batch.positions();
    const std::vector<int32_t> tgt = b.batch.targets();
    int64_t row = 0;
    for (int64_t len : b.batch.seq_lens) {
      EXPECT_EQ(pos[static_cast<size_t>(row)], 0);
      EXPECT_EQ(tgt[static_cast<size_t>(row + len - 1)], -1);
      row += len;
    }
  }
  // Greedy in order: the concatenation of plans is the visiting order.
  EXPECT_EQ(seen, order);
  // A fresh packing of the same order is the same plan (deterministic), a new epoch's differs.
  Rng again(7, "order");
  EXPECT_EQ(epoch_order(60, true, again), order);
  EXPECT_NE(epoch_order(60, true, order_rng), order);
  Rng unused(1);
  const std::vector<int64_t> ident = epoch_order(5, false, unused);
  EXPECT_EQ(ident, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(Packing, AnExampleOverTheBudgetIsAnError) {
  std::vector<Example> ex = {make_example({10}, 1, 50), make_example({30, 30}, 2, 50)};
  const std::vector<int64_t> order = {0, 1};
  EXPECT_THROW(pack_examples(ex, order, 40), InputError);
}

TEST(Packing, PackedExamplesDoNotAttendToEachOther) {
  const ModelConfig cfg =
      ModelConfig::from_file(test::source_dir() + "/examples/tiny-chat/config.json");
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Backend& be = *backend_;
  Pool pool(ledger, be);
  ParameterSet w(cfg, pool, Category::weights, DType::F32, false);
  init_parameters(w, 11, InitStyle::test);
  ExecConfig exec = parse_mode("stream");
  exec.layer_chunk = 7;  // chunks that cross segment boundaries
  exec.head_chunk = 5;
  Engine engine(cfg, w, be, pool, exec);

  std::vector<Example> ex = {make_example({13}, 1, cfg.vocab_size),
                             make_example({9, 17}, 2, cfg.vocab_size),
                             make_example({21}, 3, cfg.vocab_size)};
  const std::vector<int64_t> order = {0, 1, 2};
  const std::vector<MicroBatchPlan> together = pack_examples(ex, order, 1000);
  ASSERT_EQ(together.size(), 1u);
  const PackedBatch packed = assemble_batch(ex, together[0]);
  const Engine::TokenScores all = engine.score(packed.batch);
  int64_t row = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    MicroBatchPlan alone;
    alone.examples = {static_cast<int64_t>(i)};
    alone.tokens = ex[i].tokens();
    const PackedBatch single = assemble_batch(ex, alone);
    const Engine::TokenScores s = engine.score(single.batch);
    for (int64_t t = 0; t < single.batch.size(); ++t) {
      EXPECT_NEAR(all.logp[static_cast<size_t>(row + t)], s.logp[static_cast<size_t>(t)], 1e-4)
          << "example " << i << " row " << t;
    }
    row += single.batch.size();
  }
}

}  // namespace
}  // namespace sbp
