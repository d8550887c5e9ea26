// The checking backend of the tests (backend/cpu/checked_cpu_backend.h): its memory is out of
// reach except inside its own operations and transfers, so a planted direct access — what any
// code outside src/backend must never do — faults at once, while the same program through
// upload/download and the backend's operations runs. The plain CPU backend is the control.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/checked_cpu_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/pool.h"

namespace sbp {
namespace {

TEST(CheckedMemory, OperationsAndTransfersRun) {
  CheckedCpuBackend be;
  Ledger ledger;
  Pool pool(ledger, be);
  Buffer a = pool.zeros(Category::other, DType::F32, {4, 4});
  Buffer b = pool.allocate(Category::other, DType::BF16, {4, 4});
  upload_f32(a.view(), std::vector<float>(16, 1.5f));
  be.copy(b.view(), a.view());
  be.scale_inplace(a.view(), 2.0f);
  EXPECT_EQ(download_f32(a.view())[5], 3.0f);
  EXPECT_EQ(download_f32(b.view())[5], 1.5f);
  EXPECT_DOUBLE_EQ(be.sum_squares(a.view()), 16 * 9.0);
  b.reset();  // freed blocks are reused
  Buffer c = pool.allocate(Category::other, DType::F32, {8});
  EXPECT_EQ(download_f32(c.view()).size(), 8u);
}

TEST(CheckedMemory, APlantedDirectAccessFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CheckedCpuBackend be;
  Ledger ledger;
  Pool pool(ledger, be);
  Buffer a = pool.zeros(Category::other, DType::F32, {16});
  const Tensor t = a.view();
  EXPECT_DEATH(
      {
        volatile float x = t.f32()[3];  // a read outside the backend
        (void)x;
      },
      "");
  EXPECT_DEATH({ t.f32()[3] = 1.0f; }, "");  // a write outside the backend
  EXPECT_EQ(download_f32(t)[3], 0.0f);       // and the backend's own way still works
}

TEST(CheckedMemory, ThePlainCpuBackendDoesNotCheck) {
  CpuBackend be;
  Ledger ledger;
  Pool pool(ledger, be);
  Buffer a = pool.zeros(Category::other, DType::F32, {16});
  a.view().f32()[3] = 2.0f;  // host memory: reachable (which is what the checking backend is for)
  EXPECT_EQ(download_f32(a.view())[3], 2.0f);
}

TEST(CheckedMemory, OperationsRefuseTensorsOfAnotherMemory) {
  CheckedCpuBackend be;
  CpuBackend other;
  Ledger ledger;
  Pool mine(ledger, be), theirs(ledger, other);
  Buffer a = mine.zeros(Category::other, DType::F32, {4});
  Buffer b = theirs.zeros(Category::other, DType::F32, {4});
  EXPECT_THROW(be.add_inplace(a.view(), b.view()), ShapeError);
  std::vector<float> host(4, 1.0f);
  EXPECT_THROW(be.add_inplace(a.view(), Tensor(host.data(), DType::F32, {4})), ShapeError);
  EXPECT_NO_THROW(be.add_inplace(a.view(), a.view()));
}

}  // namespace
}  // namespace sbp
