#include "backend/sgemm_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/cpu/blas.h"

namespace sbp {

double measure_sgemm_gflops(long n, int repeats) {
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {  // the first run warms caches and thread pools
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(n), 1.0f, a.data(), static_cast<int>(n), b.data(),
                static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * static_cast<double>(n) * n * n / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace sbp
