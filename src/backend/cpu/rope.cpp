// Rotary position embedding, Hugging Face "rotate_half" layout: the first and second halves
// of each head are the two coordinates of each rotated pair. x may be F32 or BF16 (rotated in
// fp32, rounded once when stored); the table is F32.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"

namespace sbp {

void CpuBackend::rope_table_impl(const Tensor& table, std::span<const float> inv_freq,
                                 float attention_factor, int64_t first_position) {
  const int64_t P = table.rows(), h = table.cols(), half = h / 2;
  float* pt = table.f32();  // (P, h): [s cos | s sin]
  const float s = attention_factor;
#pragma omp parallel for schedule(static) if (P * h > cpu::kMinParallelWork)
  for (int64_t r = 0; r < P; ++r) {
    const int64_t p = first_position + r;
    for (int64_t i = 0; i < half; ++i) {
      // The angle is rounded to fp32 first, as transformers computes it (fp32 outer product);
      // cos and sin are rounded to fp32 before the fp32 product with s, as there.
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float sn = static_cast<float>(std::sin(static_cast<double>(angle)));
      pt[r * h + i] = c * s  /* exact when s = 1 */;
      pt[r * h + half + i] = sn * s;
    }
  }
}

namespace {
// sign = +1: forward rotation; -1: inverse (transpose) rotation.
template <class TX>
void rope_apply(TX* px, int64_t n, int64_t cols, const int32_t* pos, const float* pt, int64_t h,
                float sign) {
  // px (n, heads*h) with cols = heads*h; pos (n); pt (P, h)
  const int64_t half = h / 2, heads = cols / h;
#pragma omp parallel for schedule(static) if (n * cols > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float* c = pt + static_cast<int64_t>(pos[i]) * h;
    const float* s = c + half;
    for (int64_t hd = 0; hd < heads; ++hd) {
      TX* x1 = px + i * cols + hd * h;
      TX* x2 = x1 + half;
      for (int64_t j = 0; j < half; ++j) {
        const float a = cpu::load(x1[j]), b = cpu::load(x2[j]), sj = sign * s[j];
        cpu::store(x1[j], a * c[j] - b * sj);
        cpu::store(x2[j], b * c[j] + a * sj);
      }
    }
  }
}

void rope_apply(const Tensor& x, const Tensor& positions, const Tensor& table, float sign) {
  const int64_t n = x.rows(), P = table.rows();
  const int32_t* pos = positions.i32();  // (n)
  // The positions index the table: checked here, where the data is, and before the parallel
  // loop (no throws inside it).
  for (int64_t i = 0; i < n; ++i) {
    SBP_CHECK(pos[i] >= 0 && pos[i] < P, "rope: position " + std::to_string(pos[i]) +
                                             " outside the table of " + std::to_string(P));
  }
  cpu::with_float_data(
      [&](auto* px) { rope_apply(px, n, x.cols(), pos, table.f32(), table.cols(), sign); }, x);
}
}  // namespace

void CpuBackend::rope_forward_impl(const Tensor& x, const Tensor& positions, const Tensor& table) {
  rope_apply(x, positions, table, 1.0f);
}

void CpuBackend::rope_backward_impl(const Tensor& dx, const Tensor& positions,
                                    const Tensor& table) {
  rope_apply(dx, positions, table, -1.0f);
}

}  // namespace sbp
