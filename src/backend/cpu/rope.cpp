// Rotary position embedding, Hugging Face "rotate_half" layout: the first and second halves
// of each head are the two coordinates of each rotated pair.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"

namespace sbp {

void CpuBackend::rope_table_impl(const Tensor& table, std::span<const float> inv_freq) {
  const int64_t P = table.rows(), h = table.cols(), half = h / 2;
  float* pt = table.f32();  // (P, h): [cos | sin]
#pragma omp parallel for schedule(static) if (P * h > cpu::kMinParallelWork)
  for (int64_t p = 0; p < P; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      // The angle is rounded to fp32 first, as transformers computes it (fp32 outer product).
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      pt[p * h + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      pt[p * h + half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

namespace {
// sign = +1: forward rotation; -1: inverse (transpose) rotation.
void rope_apply(const Tensor& x, const Tensor& positions, const Tensor& table, float sign) {
  const int64_t n = x.rows(), h = table.cols(), half = h / 2, P = table.rows();
  const int64_t heads = x.cols() / h;
  float* px = x.f32();                   // (n, heads*h)
  const int32_t* pos = positions.i32();  // (n)
  const float* pt = table.f32();         // (P, h)
  // The positions index the table: checked here, where the data is, and before the parallel
  // loop (no throws inside it).
  for (int64_t i = 0; i < n; ++i) {
    SBP_CHECK(pos[i] >= 0 && pos[i] < P, "rope: position " + std::to_string(pos[i]) +
                                             " outside the table of " + std::to_string(P));
  }
#pragma omp parallel for schedule(static) if (n * x.cols() > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float* c = pt + static_cast<int64_t>(pos[i]) * h;
    const float* s = c + half;
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* x1 = px + i * x.cols() + hd * h;
      float* x2 = x1 + half;
      for (int64_t j = 0; j < half; ++j) {
        const float a = x1[j], b = x2[j], sj = sign * s[j];
        x1[j] = a * c[j] - b * sj;
        x2[j] = b * c[j] + a * sj;
      }
    }
  }
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
