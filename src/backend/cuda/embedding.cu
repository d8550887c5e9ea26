// Token embedding lookup and its scatter-add backward.
//
// Backward, deterministic without float atomics: the ids (n I32, small) are copied to the host,
// checked there (the CPU backend's message), and sorted stably by id into runs: for each
// distinct id v other than the padding row, the rows i with ids[i] == v in increasing i. One
// thread per (run, column) then sums its run in that order in fp32, starting from the stored
// dtable value, and stores once: the same additions in the same order as the CPU backend (cpu/embedding.cpp), so an F32 dtable
// gets the CPU's bits and a BF16 one is rounded once per element and call.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"

namespace sbp {

namespace {

using cuda::FPtr;
using cuda::fptr;

std::string id_message(int64_t i, int64_t v, int64_t vocab) {
  return "token id " + std::to_string(v) + " at position " + std::to_string(i) +
         " outside the vocabulary of " + std::to_string(vocab);
}

__global__ void gather_kernel(const unsigned* failed, FPtr x, FPtr table, const int32_t* ids,
                              int64_t n, int64_t d) {
  if (*failed) return;  // an id is out of the table (checks.cu)
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n * d;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / d, j = e % d;
    x.st(e, table.ld(static_cast<int64_t>(ids[i]) * d + j));
  }
}

// runs: [u ids | u + 1 offsets | m rows]; grid (u, ceil(d / 256)): the runs go on grid x, whose
// limit is 2^31 - 1 (a long sequence has far more than grid y's 65535 distinct ids).
__global__ void scatter_runs_kernel(FPtr dtable, FPtr dx, const int32_t* runs, int64_t u,
                                    int64_t d) {
  const int64_t j = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  const int64_t r = blockIdx.x;
  if (j >= d) return;
  const int32_t* offsets = runs + u;
  const int32_t* rows = runs + 2 * u + 1;
  const int64_t at = static_cast<int64_t>(runs[r]) * d + j;
  float acc = dtable.ld(at);
  for (int32_t k = offsets[r]; k < offsets[r + 1]; ++k)
    acc += dx.ld(static_cast<int64_t>(rows[k]) * d + j);
  dtable.st(at, acc);
}

}  // namespace

void CudaBackend::embedding_forward_impl(const Tensor& x, const Tensor& ids, const Tensor& table) {
  const int64_t V = table.rows(), n = x.rows(), d = x.cols();
  check_index_range(ids, 0, V, [V](int64_t i, int64_t v) { return id_message(i, v, V); });
  if (n * d == 0) return;
  SBP_LAUNCH(gather_kernel, cuda::grid_for(n * d, 256), 256, 0, stream_, check_failed(),
             fptr(x), fptr(table), ids.i32(), n, d);
}

void CudaBackend::embedding_backward_impl(const Tensor& dtable, const Tensor& dx,
                                          const Tensor& ids, int64_t padding_row) {
  const int64_t V = dtable.rows(), n = dx.rows(), d = dx.cols();
  if (n == 0) return;
  std::vector<int32_t> id(static_cast<size_t>(n));
  download_impl(id.data(), ids.data, sizeof(int32_t) * n);
  for (int64_t i = 0; i < n; ++i)
    SBP_CHECK(id[i] >= 0 && id[i] < V, id_message(i, id[i], V));
  if (d == 0) return;
  std::vector<int32_t> order;  // the rows that add, stably sorted by id
  order.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (id[i] != padding_row) order.push_back(static_cast<int32_t>(i));
  if (order.empty()) return;
  const int64_t m = static_cast<int64_t>(order.size());
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return id[a] < id[b]; });
  std::vector<int32_t> uniq, offsets;
  for (int64_t k = 0; k < m; ++k) {
    if (k == 0 || id[order[k]] != id[order[k - 1]]) {
      uniq.push_back(id[order[k]]);
      offsets.push_back(static_cast<int32_t>(k));
    }
  }
  offsets.push_back(static_cast<int32_t>(m));
  const int64_t u = static_cast<int64_t>(uniq.size());
  std::vector<int32_t> runs;  // [u ids | u + 1 offsets | m rows]
  runs.reserve(static_cast<size_t>(2 * u + 1 + m));
  runs.insert(runs.end(), uniq.begin(), uniq.end());
  runs.insert(runs.end(), offsets.begin(), offsets.end());
  runs.insert(runs.end(), order.begin(), order.end());
  auto* dev = static_cast<int32_t*>(scratch(kScratchB, sizeof(int32_t) * runs.size()));
  upload_impl(dev, runs.data(), sizeof(int32_t) * runs.size());  // staged: runs may go (upload_impl)
  const dim3 grid(static_cast<unsigned>(u), static_cast<unsigned>((d + 255) / 256));
  SBP_LAUNCH(scatter_runs_kernel, grid, 256, 0, stream_, fptr(dtable), fptr(dx), dev, u, d);
}

}  // namespace sbp
