// HostMath (backend/host_math.h), the host side of offload: optimizer: its arithmetic on host
// memory gives the CPU backend's bits for the same operation on the device (the same kernels),
// AdamW included for F32 and BF16 parameters; it refuses a device tensor and a host tensor
// whose copy has not been waited for; and on the checking backend, whose host space is out of
// reach outside the copies and HostMath's own scope, a planted host read faults.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/checked_cpu_backend.h"
#include "backend/host_math.h"
#include "core/pool.h"
#include "core/rng.h"

namespace sbp {
namespace {

std::vector<float> normals(int64_t n, uint64_t seed) {
  Rng rng(seed, "host-math");
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.normal());
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Spaces {
  CheckedCpuBackend be;
  Ledger ledger, host_ledger;
  Pool pool{ledger, be}, host{host_ledger, be.host_memory()};
  HostMath math{be.host_memory()};
};

TEST(HostMath, GivesTheDeviceKernelsBits) {
  Spaces s;
  const int64_t n = 4099;  // not a multiple of any vector width; parallel above kMinParallelWork
  for (DType pd : {DType::F32, DType::BF16}) {
    // Device: p, g, m, v; host: the same values.
    const std::vector<float> p0 = normals(n, 1), g0 = normals(n, 2), m0 = normals(n, 3);
    std::vector<float> v0 = normals(n, 4);
    for (float& x : v0) x = x * x;
    Buffer dp = s.pool.allocate(Category::other, pd, {n}), hp = s.host.allocate(Category::other, pd, {n});
    Buffer dg = s.pool.allocate(Category::other, DType::F32, {n}),
           hg = s.host.allocate(Category::other, DType::F32, {n});
    Buffer dm = s.pool.allocate(Category::other, DType::F32, {n}),
           hm = s.host.allocate(Category::other, DType::F32, {n});
    Buffer dv = s.pool.allocate(Category::other, DType::F32, {n}),
           hv = s.host.allocate(Category::other, DType::F32, {n});
    for (const auto& [d, h, x] : {std::tuple{&dp, &hp, &p0}, std::tuple{&dg, &hg, &g0},
                                  std::tuple{&dm, &hm, &m0}, std::tuple{&dv, &hv, static_cast<const std::vector<float>*>(&v0)}}) {
      upload_f32(d->view(), *x);
      upload_f32(h->view(), *x);
    }
    for (int64_t step = 1; step <= 3; ++step) {
      const AdamWStep a{.lr = 1e-3f, .weight_decay = 0.1f, .step = step};
      s.be.adamw_step(dp.view(), dg.view(), dm.view(), dv.view(), a);
      s.math.adamw_step(hp.view(), hg.view(), hm.view(), hv.view(), a);
    }
    s.be.scale_inplace(dg.view(), 0.37f);
    s.math.scale_inplace(hg.view(), 0.37f);
    s.be.add_inplace(dg.view(), dm.view());
    s.math.add_inplace(hg.view(), hm.view());
    for (const auto& [d, h] : {std::pair{&dp, &hp}, std::pair{&dg, &hg}, std::pair{&dm, &hm},
                               std::pair{&dv, &hv}})
      EXPECT_TRUE(same_bits(download_f32(d->view()), download_f32(h->view()))) << dtype_name(pd);
    const Tensor parts[] = {hg.view(), hm.view()};
    double host[2];
    s.math.sum_squares_each(parts, host);
    EXPECT_EQ(host[0], s.be.sum_squares(dg.view()));
    EXPECT_EQ(host[1], s.be.sum_squares(dm.view()));
    // F32 -> BF16 rounding, as Backend::copy.
    Buffer db = s.pool.allocate(Category::other, DType::BF16, {n}),
           hb = s.host.allocate(Category::other, DType::BF16, {n});
    s.be.copy(db.view(), dg.view());
    s.math.copy(hb.view(), hg.view());
    EXPECT_TRUE(same_bits(download_f32(db.view()), download_f32(hb.view())));
  }
}

TEST(HostMath, RefusesADeviceTensorAndACopyNotWaitedFor) {
  Spaces s;
  Buffer d = s.pool.zeros(Category::other, DType::F32, {64});
  Buffer h = s.host.zeros(Category::other, DType::F32, {64});
  try {
    s.math.scale_inplace(d.view(), 2.0f);
    ADD_FAILURE() << "a device tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not in host memory"), std::string::npos) << e.what();
  }
  const Backend::CopyTicket t = s.be.offload_async(h.view(), d.view());
  try {
    s.math.fill(h.view(), 1.0f);
    ADD_FAILURE() << "a host tensor under a copy was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host fill"), std::string::npos) << e.what();
  }
  s.be.wait_copy(t);
  s.math.fill(h.view(), 1.0f);  // waited for: the host may write it
  EXPECT_EQ(download_f32(h.view())[7], 1.0f);
}

TEST(HostMath, APlantedHostReadOfTheCheckedHostSpaceFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Spaces s;
  Buffer h = s.host.zeros(Category::other, DType::F32, {16});
  const Tensor t = h.view();
  EXPECT_DEATH(
      {
        volatile float x = static_cast<const float*>(t.data)[3];
        (void)x;
      },
      "");
}

}  // namespace
}  // namespace sbp
