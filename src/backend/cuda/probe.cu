// The helpers `bench` uses with a CUDA backend (cuda_factory.h): synchronisation for timing,
// per-run device peaks, and the bf16 GEMM probe.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda_factory.h"
#include "core/pool.h"

namespace sbp {

void cuda_reset_device_peaks(Backend& be) {
  if (auto* c = dynamic_cast<CudaBackend*>(&be)) c->arena().reset_peaks();
}

void cuda_synchronize(Backend& be) {
  be.synchronize();  // the stream, and the device-side checks' reports
}

double cuda_bf16_gemm_gflops(Backend& be, int64_t n) {
  auto* c = dynamic_cast<CudaBackend*>(&be);
  if (!c) return 0.0;
#if defined(STREAMBP_CUDA_EMULATION)
  // The emulated device's rate says nothing of a GPU's: a small probe keeps bench's yardstick
  // (and gpu-check.sh's dry run, tests/scripts/gpu_check_emulated.sh) cheap.
  n = std::min<int64_t>(n, 128);
#endif
  Ledger ledger;
  Pool pool(ledger, be);
  Buffer A = pool.allocate(Category::other, DType::BF16, Shape{n, n});
  Buffer B = pool.allocate(Category::other, DType::BF16, Shape{n, n});
  Buffer C = pool.allocate(Category::other, DType::BF16, Shape{n, n});
  // Values in [-1, 1) (random data: tensor cores draw less power on zeros and run faster).
  be.fill(A.view(), 0.0f);
  be.fill(B.view(), 0.0f);
  std::vector<float> row(static_cast<size_t>(n));
  uint32_t s = 12345;
  for (int64_t r = 0; r < std::min<int64_t>(n, 64); ++r) {
    for (float& x : row) x = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    upload_f32(A.rows(r, r + 1), row);
    upload_f32(B.rows(r, r + 1), row);
  }
  cudaEvent_t t0, t1;
  SBP_CUDA(cudaEventCreate(&t0));
  SBP_CUDA(cudaEventCreate(&t1));
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    SBP_CUDA(cudaEventRecord(t0, c->stream()));
    be.gemm(C.view(), A.view(), false, B.view(), true, 1.0f, 0.0f);
    SBP_CUDA(cudaEventRecord(t1, c->stream()));
    SBP_CUDA(cudaEventSynchronize(t1));
    float e = 0;
    SBP_CUDA(cudaEventElapsedTime(&e, t0, t1));
    if (i >= 2) ms.push_back(e);
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  be.reset_flops();  // the probe's products are not a step's (bench resets before each step)
  std::sort(ms.begin(), ms.end());
  const double sec = ms[ms.size() / 2] / 1e3;
  return 2.0 * static_cast<double>(n) * n * n / sec / 1e9;
}

}  // namespace sbp
