#include "backend/cpu/copy_probe.h"

#include <algorithm>
#include <chrono>
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

}  // namespace sbp
