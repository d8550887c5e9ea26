#include <gtest/gtest.h>

#include "core/pool.h"

namespace sbp {
namespace {

TEST(Ledger, TracksLivePeakAndBreakdownAtPeak) {
  Ledger ledger;
  Pool pool(ledger);
  Buffer w = pool.allocate(Category::weights, DType::F32, {100});
  {
    Buffer a = pool.allocate(Category::layer_workspace, DType::F32, {50});
    Buffer l = pool.allocate(Category::logits, DType::BF16, {10, 10});
    EXPECT_EQ(ledger.live(), 400 + 200 + 200);
  }
  EXPECT_EQ(ledger.live(), 400);
  EXPECT_EQ(ledger.peak(), 800);
  EXPECT_EQ(ledger.peak_breakdown()[Category::layer_workspace], 200);
  EXPECT_EQ(ledger.peak_breakdown()[Category::logits], 200);
  Buffer g = pool.allocate(Category::grads, DType::F32, {10});
  EXPECT_EQ(ledger.peak(), 800);  // smaller than the old peak: breakdown unchanged
  EXPECT_EQ(ledger.peak_breakdown()[Category::grads], 0);
  EXPECT_EQ(ledger.category_peak(Category::grads), 40);
}

TEST(Ledger, BudgetGivesOutOfMemoryNamingTheCategory) {
  Ledger ledger(1000);
  Pool pool(ledger);
  Buffer w = pool.allocate(Category::weights, DType::F32, {200});
  try {
    Buffer big = pool.allocate(Category::logits, DType::F32, {100});
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.category, Category::logits);
    EXPECT_NE(std::string(e.what()).find("logits"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("weights"), std::string::npos);
  }
  EXPECT_EQ(ledger.live(), 800);  // the failed request recorded nothing
}

TEST(Pool, MetaPoolRecordsBytesWithoutMemory) {
  Ledger ledger;
  Pool pool(ledger, PoolOptions{.materialize = false});
  Buffer b = pool.allocate(Category::checkpoints, DType::BF16, {1 << 20, 1 << 10});
  EXPECT_EQ(b.view().data, nullptr);
  EXPECT_EQ(ledger.live(), int64_t{2} << 30);
}

TEST(Tensor, SliceRowsIsAView) {
  Ledger ledger;
  Pool pool(ledger);
  Buffer b = pool.zeros(Category::other, DType::F32, {4, 3});
  Tensor r = b.rows(1, 3);
  EXPECT_EQ(r.shape, Shape({2, 3}));
  r.f32()[0] = 5.0f;
  EXPECT_EQ(b.f32()[3], 5.0f);
  EXPECT_THROW(b.rows(3, 5), ShapeError);
}

}  // namespace
}  // namespace sbp
