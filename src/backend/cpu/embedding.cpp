// Token embedding lookup and its scatter-add backward. table, x, dtable, dx may each be F32 or
// BF16 (storage.h).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

namespace {

using cpu::bf16;
using cpu::load;
using cpu::store;

// The ids index the table: checked here, where the data is, before the parallel loops.
void check_ids(const Tensor& ids, int64_t vocab) {
  const int32_t* p = ids.i32();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    SBP_CHECK(p[i] >= 0 && p[i] < vocab, "token id " + std::to_string(p[i]) + " at position " +
                                             std::to_string(i) + " outside the vocabulary of " +
                                             std::to_string(vocab));
  }
}

// x (n, d) = rows pid (n) of table (V, d): the row's bytes when the storage types agree.
template <class TX, class TT>
void gather_rows(TX* px, const TT* pt, const int32_t* pid, int64_t n, int64_t d) {
#pragma omp parallel for schedule(static) if (n * d > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    TX* dst = px + i * d;
    const TT* src = pt + static_cast<int64_t>(pid[i]) * d;
    if constexpr (std::is_same_v<TX, TT>) {
      std::memcpy(dst, src, sizeof(TX) * d);
    } else {
      for (int64_t j = 0; j < d; ++j) store(dst[j], load(src[j]));
    }
  }
}

// dtable (V, d) += scatter of dx (n, d) by ids, dtable F32: in place; ids equal to `skip` (the
// padding row, or -1) add nothing.
// Repeated ids would race if rows were split across threads; splitting the columns keeps
// every element's sum in row order (deterministic) with no atomics.
template <class TDX>
void scatter_add_f32(float* pdt, const TDX* pdx, const int32_t* pid, int64_t n, int64_t d,
                     int64_t skip) {
#pragma omp parallel if (n * d > cpu::kMinParallelWork)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t c0 = d * t / nt, c1 = d * (t + 1) / nt;
    for (int64_t i = 0; i < n; ++i) {
      if (pid[i] == skip) continue;
      float* dst = pdt + static_cast<int64_t>(pid[i]) * d;
      const TDX* src = pdx + i * d;
      for (int64_t j = c0; j < c1; ++j) dst[j] += load(src[j]);
    }
  }
}

// Rows of fp32 accumulators for a BF16 dtable: 2^20 floats (4 MiB), at least one row.
constexpr int64_t kAccFloats = int64_t{1} << 20;

// dtable (V, d) += scatter of dx (n, d) by ids, dtable BF16. Each touched element is summed in
// fp32 in row order, as in scatter_add_f32, starting from its stored value, and rounded once.
// The fp32 sums live in a bounded buffer of R = max(1, 2^20 / d) rows, which holds the table
// rows [v0, v0 + R) of one pass; a pass reads all ids and takes the rows whose id falls in its
// range, and passes cover [min id, max id]. So the scratch is at most max(4 MiB, 4 d bytes),
// whatever n and V are, for n * (id range / R) id comparisons (for a 151936-token vocabulary
// and d = 1024: 149 comparisons per row of dx, next to its d additions).
// As scatter_add_f32, `skip` too.
template <class TDX>
void scatter_add_bf16(bf16* pdt, const TDX* pdx, const int32_t* pid, int64_t n, int64_t d,
                      int64_t skip) {
  if (n == 0 || d == 0) return;
  const auto [lo_it, hi_it] = std::minmax_element(pid, pid + n);
  const int64_t id_lo = *lo_it, id_hi = *hi_it;
  const int64_t R = std::max<int64_t>(1, kAccFloats / d);
  const int64_t acc_rows = std::min(R, id_hi - id_lo + 1);
  std::unique_ptr<float[]> acc =
      std::make_unique_for_overwrite<float[]>(static_cast<size_t>(acc_rows * d));  // (R, d)
  std::unique_ptr<uint8_t[]> touched = std::make_unique<uint8_t[]>(static_cast<size_t>(acc_rows));
  for (int64_t v0 = id_lo; v0 <= id_hi; v0 += R) {
    const int64_t v1 = std::min(v0 + R, id_hi + 1);
    std::fill(touched.get(), touched.get() + (v1 - v0), uint8_t{0});
    for (int64_t i = 0; i < n; ++i)
      if (pid[i] >= v0 && pid[i] < v1 && pid[i] != skip) touched[pid[i] - v0] = 1;
#pragma omp parallel if (n * d > cpu::kMinParallelWork)
    {
      // Columns split across threads, as in scatter_add_f32.
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t c0 = d * t / nt, c1 = d * (t + 1) / nt;
      for (int64_t r = 0; r < v1 - v0; ++r) {
        if (!touched[r]) continue;
        const bf16* src = pdt + (v0 + r) * d;
        float* a = acc.get() + r * d;
        for (int64_t j = c0; j < c1; ++j) a[j] = load(src[j]);
      }
      for (int64_t i = 0; i < n; ++i) {
        if (pid[i] < v0 || pid[i] >= v1 || pid[i] == skip) continue;
        float* a = acc.get() + (pid[i] - v0) * d;
        const TDX* src = pdx + i * d;
        for (int64_t j = c0; j < c1; ++j) a[j] += load(src[j]);
      }
      for (int64_t r = 0; r < v1 - v0; ++r) {
        if (!touched[r]) continue;
        bf16* dst = pdt + (v0 + r) * d;
        const float* a = acc.get() + r * d;
        for (int64_t j = c0; j < c1; ++j) store(dst[j], a[j]);
      }
    }
  }
}
}  // namespace

void CpuBackend::embedding_forward_impl(const Tensor& x, const Tensor& ids, const Tensor& table) {
  check_ids(ids, table.rows());
  cpu::with_float_data(
      [&](auto* px, const auto* pt) { gather_rows(px, pt, ids.i32(), x.rows(), x.cols()); }, x,
      table);
}

void CpuBackend::embedding_backward_impl(const Tensor& dtable, const Tensor& dx,
                                         const Tensor& ids, int64_t padding_row) {
  check_ids(ids, dtable.rows());
  const int32_t* pid = ids.i32();  // (n)
  cpu::with_float_data(
      [&](auto* pdt, const auto* pdx) {  // dtable (V, d), dx (n, d)
        if constexpr (cpu::is_bf16<cpu::elem_t<decltype(pdt)>>) {
          scatter_add_bf16(pdt, pdx, pid, dx.rows(), dx.cols(), padding_row);
        } else {
          scatter_add_f32(pdt, pdx, pid, dx.rows(), dx.cols(), padding_row);
        }
      },
      dtable, dx);
}

}  // namespace sbp
