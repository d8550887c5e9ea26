// What the emulated CUDA runtime does as a GPU may, where running everything in one order on one
// host thread would hide a bug (src/backend/cuda/emulation/):
//  - streams are queues of their own, ordered only by events and the legacy stream's rules, and
//    their work runs latest-issued first where nothing orders it (streams.cpp): a copy stream
//    that does not wait for the kernel producing its source copies the old bytes, a kernel that
//    does not wait for its upload reads the old bytes;
//  - two neighbouring blocks of a launch run as if at the same time (block_pairs.cpp): a
//    non-atomic read-modify-write of one element by every block loses an update; blocks writing
//    one element with different values are reported; atomics all count;
//  - a copy from pageable host memory waits for its stream (runtime.cpp), and the wait counts;
//  - the tensor cores' additions round toward zero, in a tree per instruction
//    (tensor_core_math.h: what PTX leaves open, taken against us).
// Only the emulation build (STREAMBP_CUDA_EMULATION) has them.
#include <gtest/gtest.h>

#if defined(STREAMBP_CUDA_EMULATION)

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/emulation/emulator.h"
#include "backend/cuda/emulation/tensor_core_math.h"
#include "backend/cuda/launch.h"
#include "core/dtype.h"
#include "core/rng.h"

namespace sbp {
namespace {

__global__ void set_kernel(float* x, int n, float v) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = v;
}
__global__ void copy_kernel(float* dst, const float* src, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) dst[i] = src[i];
}
// Every block adds 1 to out[0]: a race unless atomic.
__global__ void add_one_kernel(float* out, int atomic) {
  if (threadIdx.x != 0) return;
  if (atomic)
    atomicAdd(out, 1.0f);
  else
    out[0] += 1.0f;
}
// Block b writes b + 1 to rows [b R, (b + 1) R + overlap): with overlap 1, blocks b and b + 1
// both write row (b + 1) R.
__global__ void rows_kernel(float* out, int rows, int overlap) {
  for (int i = static_cast<int>(threadIdx.x); i < rows + overlap; i += static_cast<int>(blockDim.x))
    out[static_cast<int>(blockIdx.x) * rows + i] = static_cast<float>(blockIdx.x + 1);
}

int64_t syncs() { return cudaemu::counters().syncs; }

struct Fixture : ::testing::Test {
  float* d = nullptr;
  float* h = nullptr;  // pinned
  cudaStream_t compute = nullptr, copy = nullptr;
  cudaEvent_t ev = nullptr;
  static constexpr int n = 64;
  void SetUp() override {
    cudaemu::reset_errors();
    ASSERT_EQ(cudaMalloc(&d, sizeof(float) * n * 2), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&h), sizeof(float) * n), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
  }
  void TearDown() override {
    cudaDeviceSynchronize();
    cudaEventDestroy(ev);
    cudaStreamDestroy(compute);
    cudaStreamDestroy(copy);
    cudaFreeHost(h);
    cudaFree(d);
    cudaemu::reset_errors();
  }
  void set(float* x, float v, cudaStream_t s) {
    cudaemu::launch("set", set_kernel, dim3(1), dim3(n), 0, s, x, n, v);
  }
};
using CudaStreams = Fixture;
using CudaBlocks = Fixture;
using CudaPageableCopies = Fixture;

// Offload to the host: the copy stream must wait for the kernel that wrote the source. Without
// the wait even a device-wide synchronisation runs the copy first (issued last, nothing orders
// it after the kernel).
TEST_F(CudaStreams, ACopyStreamThatDoesNotWaitForTheKernelCopiesTheOldBytes) {
  set(d, 1.0f, compute);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  set(d, 2.0f, compute);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost, copy), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(h[0], 1.0f) << "the copy ran after a kernel nothing ordered it after";
  EXPECT_EQ(h[n - 1], 1.0f);
  set(d, 3.0f, compute);
  ASSERT_EQ(cudaEventRecord(ev, compute), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(copy, ev, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost, copy), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(copy), cudaSuccess);  // runs the kernel it waits for too
  EXPECT_EQ(h[0], 3.0f);
  EXPECT_EQ(h[n - 1], 3.0f);
}

// Prefetch from the host: the kernel must wait for the copy that fills its input.
TEST_F(CudaStreams, AKernelThatDoesNotWaitForItsUploadReadsTheOldBytes) {
  float* out = d + n;
  set(d, 1.0f, compute);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < n; ++i) h[i] = 5.0f;
  ASSERT_EQ(cudaMemcpyAsync(d, h, sizeof(float) * n, cudaMemcpyHostToDevice, copy), cudaSuccess);
  cudaemu::launch("copy", copy_kernel, dim3(1), dim3(n), 0, compute, out, d, n);
  ASSERT_EQ(cudaMemcpyAsync(h, out, sizeof(float) * n, cudaMemcpyDeviceToHost, compute),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(h[0], 1.0f) << "the kernel ran after a copy nothing ordered it after";
  for (int i = 0; i < n; ++i) h[i] = 6.0f;
  ASSERT_EQ(cudaMemcpyAsync(d, h, sizeof(float) * n, cudaMemcpyHostToDevice, copy), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev, copy), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(compute, ev, 0), cudaSuccess);
  cudaemu::launch("copy", copy_kernel, dim3(1), dim3(n), 0, compute, out, d, n);
  ASSERT_EQ(cudaMemcpyAsync(h, out, sizeof(float) * n, cudaMemcpyDeviceToHost, compute),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  EXPECT_EQ(h[0], 6.0f);
}

// A stream waits for the record the event had when the wait was queued; recording the event
// again later, or destroying it, changes nothing for that wait (CUDA runtime API).
TEST_F(CudaStreams, AWaitKeepsTheRecordItSaw) {
  set(d, 1.0f, compute);
  ASSERT_EQ(cudaEventRecord(ev, compute), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(copy, ev, 0), cudaSuccess);
  set(d, 2.0f, compute);
  ASSERT_EQ(cudaEventRecord(ev, compute), cudaSuccess);  // a later record: not waited for
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost, copy), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(ev), cudaErrorNotReady);  // nothing runs before the host waits
  ASSERT_EQ(cudaStreamSynchronize(copy), cudaSuccess);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(cudaEventQuery(ev), cudaErrorNotReady) << "the copy's wait ran the later record";
  ASSERT_EQ(cudaEventSynchronize(ev), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(ev), cudaSuccess);
}

// A stream synchronisation runs that stream's work (and what it waits for), not the others'.
TEST_F(CudaStreams, AStreamSynchronisationRunsOnlyWhatItNeeds) {
  set(d, 4.0f, compute);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  set(d, 7.0f, compute);
  const int64_t before = syncs();
  ASSERT_EQ(cudaStreamSynchronize(copy), cudaSuccess);  // idle: not a counted wait
  EXPECT_EQ(syncs(), before);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost, copy), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(copy), cudaSuccess);
  EXPECT_EQ(syncs(), before + 1);
  EXPECT_EQ(h[0], 4.0f) << "the copy stream's wait ran the compute stream's kernel";
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(float) * n, cudaMemcpyDeviceToHost, copy), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(copy), cudaSuccess);
  EXPECT_EQ(h[0], 7.0f);
}

// The legacy default stream (cudaMemcpy, stream 0) waits for blocking streams, not for streams
// created with cudaStreamNonBlocking (the backend's).
TEST_F(CudaStreams, TheLegacyStreamWaitsOnlyForBlockingStreams) {
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  std::vector<float> back(n);
  set(d, 1.0f, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  set(d, 2.0f, compute);  // non-blocking
  ASSERT_EQ(cudaMemcpy(back.data(), d, sizeof(float) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[0], 1.0f);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  set(d, 3.0f, blocking);
  ASSERT_EQ(cudaMemcpy(back.data(), d, sizeof(float) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back[0], 3.0f);
  cudaStreamDestroy(blocking);
}

// Every block adds 1 to one element: without an atomic, the pair of blocks that runs as if at
// the same time loses an update; with atomicAdd all 8 count.
TEST_F(CudaBlocks, BlocksThatRaceOnOneOutputLoseAnUpdate) {
  for (int atomic : {0, 1}) {
    ASSERT_EQ(cudaMemset(d, 0, sizeof(float)), cudaSuccess);
    cudaemu::launch("add_one", add_one_kernel, dim3(8), dim3(32), 0, nullptr, d, atomic);
    float got = -1.0f;
    ASSERT_EQ(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
    if (atomic)
      EXPECT_EQ(got, 8.0f);
    else
      EXPECT_LT(got, 8.0f) << "the non-atomic update of every block counted";
  }
}

// Neighbouring blocks that both write one element, with different values, are reported: a
// sticky launch failure naming the kernel and the blocks.
TEST_F(CudaBlocks, NeighbouringBlocksWritingOneElementAreReported) {
  cudaemu::launch("rows", rows_kernel, dim3(4), dim3(32), 0, nullptr, d, 16, 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), d, sizeof(float) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < n; ++i) EXPECT_EQ(back[i], static_cast<float>(i / 16 + 1)) << i;
  // (What the blocks write must change the bytes: a write of the value already there is
  // invisible to the comparison, and harmless.)
  ASSERT_EQ(cudaMemset(d, 0, sizeof(float) * n), cudaSuccess);
  testing::internal::CaptureStderr();
  cudaemu::launch("rows", rows_kernel, dim3(3), dim3(32), 0, nullptr, d, 16, 1);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("rows: blocks ("), std::string::npos) << err;
  EXPECT_NE(err.find("race on that output"), std::string::npos) << err;
  cudaemu::reset_errors();
}

// A copy from pageable host memory waits for its stream first (it "might be synchronous"), and
// counts as a host wait when the stream has work; from pinned memory it does not wait.
TEST_F(CudaPageableCopies, AnUploadFromPageableMemoryWaitsForTheStream) {
  std::vector<float> pageable(n, 9.0f);
  set(d, 1.0f, compute);
  const int64_t before = syncs();
  ASSERT_EQ(cudaMemcpyAsync(d + n, h, sizeof(float) * n, cudaMemcpyHostToDevice, compute),
            cudaSuccess);
  EXPECT_EQ(syncs(), before) << "a copy from pinned memory waited";
  ASSERT_EQ(cudaMemcpyAsync(d + n, pageable.data(), sizeof(float) * n, cudaMemcpyHostToDevice,
                            compute),
            cudaSuccess);
  EXPECT_EQ(syncs(), before + 1) << "a copy from pageable memory did not wait for the stream";
  ASSERT_EQ(cudaMemcpyAsync(d + n, pageable.data(), sizeof(float) * n, cudaMemcpyHostToDevice,
                            compute),
            cudaSuccess);
  EXPECT_EQ(syncs(), before + 2);  // the first pageable copy is still queued
  ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d + n, pageable.data(), sizeof(float) * n, cudaMemcpyHostToDevice,
                            compute),
            cudaSuccess);
  EXPECT_EQ(syncs(), before + 3) << "an idle stream's wait was counted";  // the sync above
}

// tensor_core_math.h: a + b rounded toward zero, exactly (against long double), over random
// pairs of every sign and magnitude ratio; and an instruction's tree: products exact, the sum
// truncated.
TEST(TensorCoreMath, AdditionsRoundTowardZeroExactly) {
  Rng rng(11);
  // Magnitudes within 2^31 of each other: the sum is exact in long double (64 bits).
  auto draw = [&] {
    const double v = (1.0 + rng.uniform()) * std::ldexp(1.0, static_cast<int>(rng.below(30)) - 15);
    return static_cast<float>(rng.below(2) ? -v : v);
  };
  int inexact = 0;
  for (int i = 0; i < 200000; ++i) {
    const float a = draw(), b = draw();
    const long double exact = static_cast<long double>(a) + b;
    float want = static_cast<float>(exact);  // to nearest, then toward zero if it went past
    if (std::fabs(static_cast<long double>(want)) > std::fabs(exact)) want = std::nextafter(want, 0.0f);
    inexact += static_cast<long double>(want) != exact;
    ASSERT_EQ(cudaemu::tc::add_rz(a, b), want) << a << " + " << b;
  }
  EXPECT_GT(inexact, 100000);  // most sums were rounded: the cases above ran
  // 1 + 0.75 ulp(1): to nearest 1 + 2^-23, toward zero 1.
  const float x[2] = {1.0f, 1.5f * std::ldexp(1.0f, -24)}, y[2] = {1.0f, 1.0f};
  EXPECT_EQ(cudaemu::tc::mma_dot(0.0f, x, y, 2), 1.0f);
  const float xn[2] = {-1.0f, -1.5f * std::ldexp(1.0f, -24)};
  EXPECT_EQ(cudaemu::tc::mma_dot(0.0f, xn, y, 2), -1.0f);
  // Subnormal inputs read as zero.
  const float sub[2] = {std::ldexp(1.0f, -130), 0.0f};
  EXPECT_EQ(cudaemu::tc::mma_dot(0.0f, sub, y, 2), 0.0f);
}

// The vectorised forms (a WMMA tile, a column of cuBLASLt rows) are mma_dot's operations in
// its order: the same bits, including NaN/inf and subnormal inputs.
TEST(TensorCoreMath, TileAndRowFormsGiveTheScalarBits) {
  Rng rng(5);
  auto draw = [&] {
    const uint64_t kind = rng.below(50);
    if (kind == 0) return std::ldexp(1.0f, -140);  // subnormal
    if (kind == 1) return INFINITY;
    return static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.below(20)) - 10));
  };
  for (int rep = 0; rep < 20; ++rep) {
    float a[16 * 8], b[8 * 16], c[16 * 16], d[16 * 16];
    for (float& x : a) x = draw();
    for (float& x : b) x = draw();
    for (float& x : c) x = draw();
    cudaemu::tc::mma_tile<16, 16, 8>(d, a, b, c);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n) {
        float y[8];
        for (int k = 0; k < 8; ++k) y[k] = b[k * 16 + n];
        const float want = cudaemu::tc::mma_dot(c[r * 16 + n], a + r * 8, y, 8);
        ASSERT_EQ(std::memcmp(&want, &d[r * 16 + n], 4), 0) << r << " " << n;
      }
    for (int k : {16, 7, 1}) {
      std::vector<float> x(100 * 16), acc(100), want(100);
      float y[16];
      for (float& v : x) v = draw();
      for (float& v : y) v = draw();
      for (int i = 0; i < 100; ++i) acc[i] = want[i] = draw();
      for (int i = 0; i < 100; ++i) want[i] = cudaemu::tc::mma_dot(want[i], x.data() + i * 16, y, k);
      cudaemu::tc::mma_dot_rows(acc.data(), x.data(), 16, y, 100, k);
      ASSERT_EQ(std::memcmp(acc.data(), want.data(), 400), 0) << k;
    }
  }
}

// cuBLASLt's BF16 products go through the tensor cores' additions: 1 + 1.5 2^-24 (both BF16
// values, K = 2) is 1, not the 1 + 2^-23 of round to nearest.
TEST(TensorCoreMath, CublasLtBf16SumsTruncate) {
  cublasLtHandle_t lt = nullptr;
  ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
  const uint16_t a[2] = {f32_to_bf16(1.0f), f32_to_bf16(1.5f * std::ldexp(1.0f, -24))};
  const uint16_t b[2] = {f32_to_bf16(1.0f), f32_to_bf16(1.0f)};
  ASSERT_EQ(bf16_to_f32(a[1]), 1.5f * std::ldexp(1.0f, -24));
  void *dA = nullptr, *dB = nullptr, *dC = nullptr;
  cudaMalloc(&dA, 256);
  cudaMalloc(&dB, 256);
  cudaMalloc(&dC, 256);
  cudaMemcpy(dA, a, sizeof a, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, b, sizeof b, cudaMemcpyHostToDevice);
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 1, 2, 1);  // A (1, 2)
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 2, 1, 2);  // B (2, 1)
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 1, 1, 1);
  const float alpha = 1.0f, beta = 0.0f;
  ASSERT_EQ(cublasLtMatmul(lt, op, &alpha, dA, la, dB, lb, &beta, dC, lc, dC, lc, nullptr, nullptr,
                           0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  float c = 0.0f;
  ASSERT_EQ(cudaMemcpy(&c, dC, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(c, 1.0f);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(lt);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
}

}  // namespace
}  // namespace sbp

#else

TEST(CudaEmulationFidelity, NeedsTheEmulationBuild) {
  GTEST_SKIP() << "configure with -DSTREAMBP_CUDA_EMULATION=ON (scripts/build.sh emu)";
}

#endif
