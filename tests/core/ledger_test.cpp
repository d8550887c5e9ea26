#include <gtest/gtest.h>

#include "backend/meta/meta_backend.h"
#include "core/pool.h"
#include "support/test_support.h"

namespace sbp {
namespace {

TEST(Ledger, TracksLivePeakAndBreakdownAtPeak) {
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
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
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
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
  MetaBackend shape_only;
  Pool pool(ledger, shape_only);
  Buffer b = pool.allocate(Category::checkpoints, DType::BF16, {1 << 20, 1 << 10});
  EXPECT_EQ(b.view().data, nullptr);
  EXPECT_EQ(ledger.live(), int64_t{2} << 30);
}

TEST(Tensor, SliceRowsIsAView) {
  Ledger ledger;
  const std::unique_ptr<Backend> backend_ = test::backend();
  Pool pool(ledger, *backend_);
  Buffer b = pool.zeros(Category::other, DType::F32, {4, 3});
  Tensor r = b.rows(1, 3);
  EXPECT_EQ(r.shape, Shape({2, 3}));
  upload_f32(r.slice_rows(0, 1), std::vector<float>{5.0f, 6.0f, 7.0f});
  EXPECT_EQ(download_f32(b.view())[3], 5.0f);  // row 1 of b
  EXPECT_EQ(download_f32(b.view())[5], 7.0f);
  EXPECT_THROW(b.rows(3, 5), ShapeError);
}

}  // namespace
}  // namespace sbp
