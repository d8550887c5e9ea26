#pragma once
// Deterministic parallel reductions: the rows are split into one contiguous block per
// thread, each block is reduced in order into its own partial, and the partials are summed
// in thread order. Same inputs + same thread count => same bits.
#include <omp.h>

#include <cstdint>
#include <vector>

namespace sbp::cpu {

// Below this many elements of work a kernel runs on one thread: waking a thread team costs
// more than it saves, and oversubscribed machines (tests run in parallel) make it far worse.
constexpr int64_t kMinParallelWork = int64_t{1} << 15;

// Calls body(begin, end, partial) for each thread's row block, with `partial` a zeroed
// double array of `width` entries private to that thread; returns the partials summed in
// thread order (width entries).
template <class Body>
std::vector<double> reduce_rows(int64_t rows, int64_t width, Body body) {
  const int nt = rows * width < kMinParallelWork ? 1 : omp_get_max_threads();
  std::vector<double> partials(static_cast<size_t>(nt) * static_cast<size_t>(width), 0.0);
  int used = 1;
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    const int n = omp_get_num_threads();
#pragma omp single
    used = n;
    const int64_t begin = rows * t / n, end = rows * (t + 1) / n;
    if (begin < end) body(begin, end, partials.data() + static_cast<size_t>(t) * width);
  }
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int t = 0; t < used; ++t)
    for (int64_t j = 0; j < width; ++j) total[j] += partials[static_cast<size_t>(t) * width + j];
  return total;
}

}  // namespace sbp::cpu
