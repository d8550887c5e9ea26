#include <gtest/gtest.h>

#include <limits>
#include <new>
#include <string>

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

// A memory space whose allocator always fails, by returning null or by throwing.
class ExhaustedMemory final : public MemorySpace {
 public:
  explicit ExhaustedMemory(bool throws) : throws_(throws) {}
  void* allocate_bytes(size_t) override {
    if (throws_) throw std::bad_alloc();
    return nullptr;
  }
  void release_bytes(void*, size_t) override {}
  bool holds_data() const override { return true; }
  bool host_addressable() const override { return true; }

 private:
  void upload_impl(void*, const void*, size_t) override {}
  void download_impl(void*, const void*, size_t) override {}
  void zero_impl(const Tensor&) override {}
  void poison_impl(const Tensor&) override {}
  bool throws_;
};

TEST(Pool, AllocatorFailureIsOutOfMemoryNamingCategoryAndBytes) {
  for (bool throws : {false, true}) {
    Ledger ledger;
    ExhaustedMemory memory(throws);
    Pool pool(ledger, memory);
    try {
      Buffer b = pool.allocate(Category::weights, DType::F32, {32, 32});
      FAIL() << "expected OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.cause, OomCause::allocator);
      EXPECT_EQ(e.category, Category::weights);
      EXPECT_EQ(e.requested, 4096);
      EXPECT_NE(msg.find("the allocator could not provide 4.0 KiB (4096 bytes) for 'weights'"),
                std::string::npos)
          << msg;
      EXPECT_EQ(msg.find("budget"), std::string::npos) << msg;  // no budget was involved
    }
    EXPECT_EQ(ledger.live(), 0);  // the failed request recorded nothing
  }
}

TEST(Pool, ByteCountOverflowIsAnErrorNamingTheBuffer) {
  Ledger ledger;
  MetaBackend shape_only;
  Pool pool(ledger, shape_only);
  // 2^61 F32 elements: the element count fits int64, the 2^63 bytes do not.
  try {
    Buffer b = pool.allocate(Category::logits, DType::F32, {int64_t{1} << 61});
    FAIL() << "expected an overflow error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("size overflow: the bytes of a 'logits' buffer of shape "
                       "(2305843009213693952) F32"),
              std::string::npos)
        << msg;
  }
  // Element counts past int64 are refused before the ledger sees anything.
  EXPECT_THROW(pool.allocate(Category::other, DType::F32, {int64_t{1} << 32, int64_t{1} << 32}),
               InputError);
  EXPECT_EQ(ledger.live(), 0);
}

TEST(Ledger, TotalsPastInt64AreRefusedNotWrapped) {
  Ledger ledger;
  MetaBackend shape_only;
  Pool pool(ledger, shape_only);
  // 2^62 bytes each: the first is recorded, the second would make the total 2^63.
  Buffer a = pool.allocate(Category::checkpoints, DType::BF16, {int64_t{1} << 61});
  try {
    Buffer b = pool.allocate(Category::layer_workspace, DType::BF16, {int64_t{1} << 61});
    FAIL() << "expected an overflow error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the memory ledger's live total"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ledger.live(), int64_t{1} << 62);  // unchanged by the failed request
  EXPECT_EQ(ledger.live_breakdown()[Category::layer_workspace], 0);
}

TEST(Ledger, HugeRequestPastTheBudgetIsOutOfMemory) {
  // live + bytes would overflow int64; the budget comparison must not.
  Ledger ledger(1000);
  MetaBackend shape_only;
  Pool pool(ledger, shape_only);
  Buffer w = pool.allocate(Category::weights, DType::F32, {200});
  try {
    Buffer big = pool.allocate(Category::grads, DType::BF16, {(int64_t{1} << 62) - 1});
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.cause, OomCause::budget);
    EXPECT_EQ(e.requested, std::numeric_limits<int64_t>::max() - 1);  // 2^63 - 2
    EXPECT_NE(std::string(e.what()).find("would exceed the budget"), std::string::npos);
  }
  EXPECT_EQ(ledger.live(), 800);
}

}  // namespace
}  // namespace sbp
