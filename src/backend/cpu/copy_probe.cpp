#include "backend/copy_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace sbp {

double measure_copy_bandwidth_gbs(size_t n) {
  std::vector<char> a(n, 1), b(n, 0);
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    a[static_cast<size_t>(rep)] = b[n - 1 - static_cast<size_t>(rep)];  // keep both live
  }
  std::sort(t.begin(), t.end());
  return 2.0 * static_cast<double>(n) / t[2] / 1e9;
}

double measure_read_bandwidth_gbs(size_t n) {
  const int64_t count = static_cast<int64_t>(n / sizeof(float));
  std::vector<float> a(static_cast<size_t>(count), 1.0f);
  std::vector<double> t;
  float keep = 0.0f;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
      // 16 independent lanes per thread: the loads, not one add chain, set the pace.
      float lanes[16] = {};
#pragma omp for schedule(static)
      for (int64_t i = 0; i < count / 16; ++i)
        for (int l = 0; l < 16; ++l) lanes[l] += a[static_cast<size_t>(i * 16 + l)];
      for (float x : lanes) total += x;
    }
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    keep += total;
  }
  std::sort(t.begin(), t.end());
  return static_cast<double>(count) * sizeof(float) / t[2] / 1e9 + (keep < 0.0f ? 1e-30 : 0.0);
}

}  // namespace sbp
