// Token embedding lookup and its scatter-add backward.
//
// Backward, deterministic without float atomics and without a host wait: the ids are checked on
// the device (checks.cu: a bad id is reported at the next download or synchronisation, as the
// forward's), and the rows that add are sorted on the device by the key (id << 32 | row): keys
// are distinct, so any sort gives the one order "by id, rows increasing" (a bitonic network
// here: log2(P) (log2(P) + 1) / 2 small launches for P = n rounded up to a power of two). A row
// with the padding id gets the largest key and sorts last. One block column per sorted position
// whose key starts a run of one id; its threads (one per column) sum the run's rows in that
// order in fp32, starting from the stored dtable value, and store once: the same additions in
// the same order as the CPU backend (cpu/embedding.cpp), so an F32 dtable gets the CPU's bits
// and a BF16 one is rounded once per element and call. Blocks at positions that start no run
// return at once (the number of runs is not known on the host).
#include <cstdint>

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

constexpr uint64_t kNoRow = ~uint64_t{0};  // the padding id's rows and the power-of-two tail

// keys[i] = (id << 32) | i for the rows that add; kNoRow for the rest of [0, P).
__global__ void embedding_keys_kernel(const unsigned* failed, uint64_t* keys, const int32_t* ids,
                                      int64_t n, int64_t P, int64_t padding_row) {
  if (*failed) return;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < P;
       i += int64_t{gridDim.x} * blockDim.x)
    keys[i] = i < n && ids[i] != padding_row
                  ? (static_cast<uint64_t>(static_cast<uint32_t>(ids[i])) << 32) |
                        static_cast<uint64_t>(i)
                  : kNoRow;
}

// One compare-exchange pass of the bitonic sorting network over P (a power of two) keys:
// stage k (the size of the sequences being merged), distance j.
__global__ void bitonic_pass_kernel(const unsigned* failed, uint64_t* keys, int64_t P, int64_t k,
                                    int64_t j) {
  if (*failed) return;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < P;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = i ^ j;
    if (l <= i) continue;
    const bool ascending = (i & k) == 0;
    const uint64_t a = keys[i], b = keys[l];
    if ((a > b) == ascending) {
      keys[i] = b;
      keys[l] = a;
    }
  }
}

// grid (n, ceil(d / 256)): block x = a sorted position (grid x's limit is 2^31 - 1); only a
// position that starts a run of one id works: it adds the run's rows, in order, to its row.
__global__ void scatter_runs_kernel(const unsigned* failed, FPtr dtable, FPtr dx,
                                    const uint64_t* keys, int64_t n, int64_t d) {
  if (*failed) return;
  const int64_t k = blockIdx.x;
  const int64_t j = blockIdx.y * int64_t{blockDim.x} + threadIdx.x;
  const uint64_t key = keys[k];
  if (key == kNoRow || j >= d) return;
  const uint64_t id = key >> 32;
  if (k > 0 && (keys[k - 1] >> 32) == id) return;  // not the run's first row
  const int64_t at = static_cast<int64_t>(id) * d + j;
  float acc = dtable.ld(at);
  for (int64_t r = k; r < n && keys[r] != kNoRow && (keys[r] >> 32) == id; ++r)
    acc += dx.ld(static_cast<int64_t>(keys[r] & 0xffffffffu) * d + j);
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
  check_index_range(ids, 0, V, [V](int64_t i, int64_t v) { return id_message(i, v, V); });
  if (d == 0) return;
  SBP_CHECK(n <= int64_t{INT32_MAX}, "embedding_backward: more rows than the sort keys hold");
  int64_t P = 1;
  while (P < n) P *= 2;
  auto* keys = static_cast<uint64_t*>(scratch(kScratchB, sizeof(uint64_t) * P));
  const unsigned grid = cuda::grid_for(P, 256);
  SBP_LAUNCH(embedding_keys_kernel, grid, 256, 0, stream_, check_failed(), keys, ids.i32(), n, P,
             padding_row);
  for (int64_t k = 2; k <= P; k *= 2)
    for (int64_t j = k / 2; j > 0; j /= 2)
      SBP_LAUNCH(bitonic_pass_kernel, grid, 256, 0, stream_, check_failed(), keys, P, k, j);
  const dim3 runs(static_cast<unsigned>(n), static_cast<unsigned>((d + 255) / 256));
  SBP_LAUNCH(scatter_runs_kernel, runs, 256, 0, stream_, check_failed(), fptr(dtable), fptr(dx),
             keys, n, d);
}

}  // namespace sbp
