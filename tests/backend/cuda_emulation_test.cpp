// The emulated CUDA runtime (src/backend/cuda/emulation/) and what it lets the CPU check of the
// CUDA backend: launch limits and the shared-memory opt-in, sticky faults, device memory out of
// the host's reach, stream work that waits for a synchronisation, barriers that must be there,
// the cuBLASLt shim's column-major semantics, and the backend's synchronisations (none inside a
// sequence of ops, one for the download at its end), its device-side index checks and its
// cudaMalloc error reporting. Only the emulation build (STREAMBP_CUDA_EMULATION) has them.
#include <gtest/gtest.h>

#if defined(STREAMBP_CUDA_EMULATION)

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/cuda/emulation/emulator.h"
#include "backend/cuda/launch.h"
#include "core/error.h"
#include "core/ledger.h"
#include "core/memory.h"
#include "core/pool.h"
#include "support/test_support.h"

namespace sbp {
namespace {

__global__ void scale_kernel(float* x, int n, float s) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] *= s;
}

// Each thread reads what another warp wrote: needs the barrier when `with_barrier`.
__global__ void reverse_kernel(float* out, int with_barrier) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (with_barrier) __syncthreads();
  out[threadIdx.x] = s[63 - threadIdx.x];
}

// Lane 0 waits for its warp while the others wait for the block: the kernel would hang.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x == 0)
    __syncwarp();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

int64_t syncs() { return cudaemu::counters().syncs; }

struct Fixture : ::testing::Test {
  void SetUp() override { cudaemu::reset_errors(); }
  void TearDown() override { cudaemu::reset_errors(); }
};
using CudaEmulation = Fixture;

TEST_F(CudaEmulation, LaunchLimitsAreConfigurationErrorsNotSticky) {
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 4096), cudaSuccess);
  cudaemu::launch("scale", scale_kernel, dim3(1), dim3(1025), 0, nullptr, x, 1, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudaemu::launch("scale", scale_kernel, dim3(1, 65536), dim3(32), 0, nullptr, x, 1, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudaemu::launch("scale", scale_kernel, dim3(1), dim3(32, 32, 2), 0, nullptr, x, 1, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared: not sticky
  cudaemu::launch("scale", scale_kernel, dim3(1), dim3(1024), 0, nullptr, x, 1, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(x);
}

TEST_F(CudaEmulation, DynamicSharedMemoryAbove48KiBNeedsTheOptIn) {
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 4096), cudaSuccess);
  const size_t smem = 64 * 1024;
  cudaemu::launch("scale", scale_kernel, dim3(1), dim3(32), smem, nullptr, x, 1, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(scale_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(smem)),
            cudaSuccess);
  cudaemu::launch("scale", scale_kernel, dim3(1), dim3(32), smem, nullptr, x, 1, 2.0f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  EXPECT_EQ(cudaFuncSetAttribute(scale_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 optin + 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(x);
}

TEST_F(CudaEmulation, WorkRunsOnlyWhenTheHostWaits) {
  float* d = nullptr;
  float* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 4), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(float) * 4), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const float ones[4] = {1, 1, 1, 1};
  pinned[0] = -7.0f;
  const int64_t before = syncs();
  ASSERT_EQ(cudaMemcpyAsync(d, ones, sizeof ones, cudaMemcpyHostToDevice, s), cudaSuccess);
  cudaemu::launch("scale", scale_kernel, dim3(1), dim3(32), 0, s, d, 4, 3.0f);
  ASSERT_EQ(cudaMemcpyAsync(pinned, d, sizeof ones, cudaMemcpyDeviceToHost, s), cudaSuccess);
  // A host read without a sync sees the old bytes, as it may on a GPU.
  EXPECT_EQ(pinned[0], -7.0f);
  EXPECT_EQ(syncs(), before);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(syncs(), before + 1);
  EXPECT_EQ(pinned[0], 3.0f);
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
  cudaFree(d);
}

TEST_F(CudaEmulation, HostCannotTouchDeviceMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* d = nullptr;
        cudaSetDevice(0);
        cudaMalloc(&d, 64);
        d[0] = 1.0f;
      },
      "host code touched device memory");
}

TEST_F(CudaEmulation, MissingSyncthreadsShows) {
  float* d = nullptr;
  std::vector<float> h(64);
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 64), cudaSuccess);
  for (int with_barrier : {1, 0}) {
    cudaemu::launch("reverse", reverse_kernel, dim3(1), dim3(64), 0, nullptr, d, with_barrier);
    ASSERT_EQ(cudaMemcpy(h.data(), d, sizeof(float) * 64, cudaMemcpyDeviceToHost), cudaSuccess);
    int wrong = 0;
    for (int t = 0; t < 64; ++t) wrong += h[t] != static_cast<float>(63 - t);
    if (with_barrier)
      EXPECT_EQ(wrong, 0);
    else
      EXPECT_GE(wrong, 32);  // one warp ran ahead and read the other's unwritten (NaN) slots
  }
  cudaFree(d);
}

TEST_F(CudaEmulation, WarpShufflesExchangeAndDivergentBarriersFaultSticky) {
  float* d = nullptr;
  std::vector<float> h(64);
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 64), cudaSuccess);
  cudaemu::launch("warp_sum", warp_sum_kernel, dim3(1), dim3(64), 0, nullptr, d);
  ASSERT_EQ(cudaMemcpy(h.data(), d, sizeof(float) * 64, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(h[t], t < 32 ? 496.0f : 1520.0f) << t;
  cudaemu::launch("divergent", divergent_barrier_kernel, dim3(1), dim3(64), 0, nullptr, d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the fault shows when the kernel runs
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchTimeout);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 4, cudaMemcpyDeviceToHost), cudaErrorLaunchTimeout);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchTimeout);  // sticky: reading does not clear it
  cudaemu::reset_errors();
  cudaFree(d);
}

// ---- cuBLASLt: D = alpha op(A) op(B) + beta C, column-major ----

struct Lt {
  cublasLtHandle_t h = nullptr;
  Lt() { cublasLtCreate(&h); }
  ~Lt() { cublasLtDestroy(h); }
};

// Column-major (rows, cols, ld) of floats on the device, from a host vector.
float* device_copy(const std::vector<float>& v) {
  float* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, sizeof(float) * v.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, v.data(), sizeof(float) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

cublasStatus_t matmul(Lt& lt, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                      int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb,
                      float* C, int64_t ldc, float alpha, float beta,
                      cudaDataType_t ab = CUDA_R_32F, cudaDataType_t c = CUDA_R_32F) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, ab, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
  cublasLtMatrixLayoutCreate(&lb, ab, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
  cublasLtMatrixLayoutCreate(&lc, c, m, n, ldc);
  const cublasStatus_t s = cublasLtMatmul(lt.h, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc,
                                          nullptr, nullptr, 0, nullptr);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  return s;
}

TEST_F(CudaEmulation, CublasLtIsColumnMajorWithTransposesAndLeadingDimensions) {
  Lt lt;
  const int64_t m = 3, n = 2, k = 4;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      const int64_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
      const int64_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
      const int64_t lda = ar + 1, ldb = br + 2, ldc = m + 3;  // padded columns
      std::vector<float> A(static_cast<size_t>(lda * ac)), B(static_cast<size_t>(ldb * bc));
      std::vector<float> C(static_cast<size_t>(ldc * n));
      for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 7) - 3.0f;
      for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(i % 5) - 1.5f;
      for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<float>(i);
      float *dA = device_copy(A), *dB = device_copy(B), *dC = device_copy(C);
      ASSERT_EQ(matmul(lt, ta, tb, m, n, k, dA, lda, dB, ldb, dC, ldc, 2.0f, 0.5f),
                CUBLAS_STATUS_SUCCESS);
      std::vector<float> got(C.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dC, sizeof(float) * got.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double a = ta == CUBLAS_OP_N ? A[i + p * lda] : A[p + i * lda];
            const double b = tb == CUBLAS_OP_N ? B[p + j * ldb] : B[j + p * ldb];
            s += a * b;
          }
          EXPECT_NEAR(got[i + j * ldc], 2.0 * s + 0.5 * C[i + j * ldc], 1e-4)
              << ta << tb << " (" << i << ", " << j << ")";
        }
      for (int64_t j = 0; j < n; ++j)  // the padding rows are not written
        for (int64_t i = m; i < ldc; ++i) EXPECT_EQ(got[i + j * ldc], C[i + j * ldc]);
      cudaFree(dA);
      cudaFree(dB);
      cudaFree(dC);
    }
}

TEST_F(CudaEmulation, CublasLtRejectsWhatTheLibraryRejects) {
  Lt lt;
  std::vector<float> v(64, 1.0f);
  float *dA = device_copy(v), *dC = device_copy(v);
  // Mixed A/B types (fp32 x bf16) are not in cublasLtMatmul's table.
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 4, 4);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 4, 4, 4);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 4, 4, 4);
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasLtMatmul(lt.h, op, &one, dA, la, dA, lb, &zero, dC, lc, dC, lc, nullptr, nullptr,
                           0, nullptr),
            CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  // bf16 inputs into a bf16 or fp32 C are fine; an fp32 C from fp32 inputs is; fp32 into bf16 is not.
  EXPECT_EQ(matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, dA, 4, dA, 4, dC, 4, 1, 0, CUDA_R_16BF,
                   CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, dA, 4, dA, 4, dC, 4, 1, 0, CUDA_R_32F,
                   CUDA_R_16BF),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // A leading dimension below the rows, and a pointer not aligned to the element.
  EXPECT_EQ(matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, dA, 3, dA, 4, dC, 4, 1, 0),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4,
                   reinterpret_cast<const float*>(reinterpret_cast<const char*>(dA) + 2), 4, dA,
                   4, dC, 4, 1, 0),
            CUBLAS_STATUS_INVALID_VALUE);
  // Operands that are not device memory.
  EXPECT_EQ(matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, v.data(), 4, dA, 4, dC, 4, 1, 0),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(dA);
  cudaFree(dC);
}

TEST_F(CudaEmulation, CublasLtBf16InputsAccumulateInFp32) {
  // bf16 operands are exact in fp32; 1 + 2^-9 * 8 is not representable in bf16 but is in fp32.
  Lt lt;
  const int k = 9;
  std::vector<uint16_t> a(k), b(k);
  a[0] = 0x3f80;  // 1
  b[0] = 0x3f80;
  for (int p = 1; p < k; ++p) {
    a[p] = 0x3b00;  // 2^-9
    b[p] = 0x3f80;
  }
  void *dA = nullptr, *dB = nullptr, *dC = nullptr;
  cudaMalloc(&dA, 256);
  cudaMalloc(&dB, 256);
  cudaMalloc(&dC, 256);
  cudaMemcpy(dA, a.data(), 2 * k, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, b.data(), 2 * k, cudaMemcpyHostToDevice);
  ASSERT_EQ(matmul(lt, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, k, static_cast<const float*>(dA), 1,
                   static_cast<const float*>(dB), k, static_cast<float*>(dC), 1, 1, 0,
                   CUDA_R_16BF, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  float c = 0;
  cudaMemcpy(&c, dC, 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(c, 1.0f + 8.0f / 512.0f);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
}

// ---- the backend on the emulated device ----

struct BackendFixture : Fixture {
  std::unique_ptr<Backend> be = make_backend(BackendSpec{BackendKind::cuda, 0});
  Ledger ledger;
  Pool pool{ledger, *be};
  Buffer f32(Shape s) { return pool.allocate(Category::other, DType::F32, s); }
  Buffer i32(const std::vector<int32_t>& v) {
    Buffer b = pool.allocate(Category::other, DType::I32, Shape{static_cast<int64_t>(v.size())});
    upload_i32(b.view(), v);
    return b;
  }
};
using CudaEmulatedBackend = BackendFixture;

// A layer's worth of ops (embedding, norm, projections, rope, attention forward and backward,
// SwiGLU, the LM head's log-softmax and gradient, AdamW) waits for the device not once; the
// download at the end waits once and reads the index checks' records with it.
TEST_F(CudaEmulatedBackend, NoSynchronisationInsideASequenceOfOps) {
  const int64_t T = 8, d = 16, V = 12, H = 2, h = 8;
  Buffer ids = i32({1, 2, 3, 4, 5, 6, 7, 0}), pos = i32({0, 1, 2, 3, 4, 5, 6, 7});
  Buffer seg = i32({0, 0, 0, 0, 4, 4, 4, 4}), targets = i32({2, 3, 4, 5, 6, 7, 8, -1});
  Buffer table = f32({V, d}), x = f32({T, d}), y = f32({T, d}), g = f32({d}), W = f32({d, d});
  Buffer q = f32({T, d}), k = f32({T, d}), v = f32({T, d}), o = f32({T, d}), lse = f32({T, H});
  Buffer dq = f32({T, d}), dk = f32({T, d}), dv = f32({T, d}), rope = f32({T, h});
  Buffer logits = f32({T, V}), tlse = f32({T}), logp = f32({T}), dlogp = f32({T});
  Buffer up = f32({T, d}), act = f32({T, d}), m = f32({d, d}), s2 = f32({d, d}), gW = f32({d, d});
  std::vector<float> inv(h / 2);
  for (int64_t i = 0; i < h / 2; ++i) inv[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * i / h);
  for (Buffer* b : {&table, &g, &W, &m, &s2, &gW, &dlogp}) be->fill(b->view(), 0.25f);
  be->rope_table(rope.view(), inv);
  be->synchronize();
  const int64_t before = syncs();
  AttentionDims dims;
  dims.n_heads = H;
  dims.n_kv_heads = H;
  dims.head_dim = h;
  dims.scale = 1.0f / std::sqrt(static_cast<float>(h));
  be->embedding_forward(x.view(), ids.view(), table.view());
  be->rmsnorm_forward(y.view(), x.view(), g.view(), 1e-6f, 0.0f);
  be->gemm(q.view(), y.view(), false, W.view(), true, 1.0f, 0.0f);
  be->gemm(k.view(), y.view(), false, W.view(), true, 1.0f, 0.0f);
  be->gemm(v.view(), y.view(), false, W.view(), true, 1.0f, 0.0f);
  be->rope_forward(q.view(), pos.view(), rope.view());
  be->rope_forward(k.view(), pos.view(), rope.view());
  be->attention_forward(o.view(), lse.view(), q.view(), k.view(), v.view(), seg.view(), 0, dims);
  be->fill(dq.view(), 0.0f);
  be->fill(dk.view(), 0.0f);
  be->fill(dv.view(), 0.0f);
  be->attention_backward(dq.view(), dk.view(), dv.view(), o.view(), q.view(), k.view(), v.view(),
                         o.view(), lse.view(), seg.view(), 0, dims);
  be->swiglu_forward(act.view(), q.view(), k.view());
  be->gemm(logits.view(), act.view(), false, table.view(), true, 1.0f, 0.0f);
  be->logsoftmax_target(tlse.view(), logp.view(), logits.view(), targets.view());
  be->dlogits_inplace(logits.view(), tlse.view(), targets.view(), dlogp.view());
  be->gemm(gW.view(), dq.view(), true, y.view(), false, 1.0f, 1.0f);
  AdamWStep st;
  st.lr = 1e-3f;
  st.step = 1;
  be->adamw_step(W.view(), gW.view(), m.view(), s2.view(), st);
  be->embedding_backward(table.view(), x.view(), ids.view());  // ids sorted on the device
  EXPECT_EQ(syncs() - before, 0) << "a backend op waited for the device";
  const std::vector<float> out = download_f32(logp.view());
  EXPECT_EQ(syncs() - before, 1);
  for (float l : out) EXPECT_TRUE(std::isfinite(l));
  EXPECT_GT(be->flops(), 0);  // attention's pairs, counted on the device, arrived with the read
}

// A gradient norm over many tensors waits once (it waited once per tensor: ~300 waits per step
// of a 28-layer model) and gives the bits of the per-tensor loop.
TEST_F(CudaEmulatedBackend, SumSquaresOfManyTensorsWaitsOnce) {
  Buffer a = f32({3, 5}), b = f32({7}), c = f32({0});
  be->fill(a.view(), 0.5f);
  be->fill(b.view(), -1.25f);
  const double each =
      be->sum_squares(a.view()) + be->sum_squares(b.view()) + be->sum_squares(c.view());
  const std::vector<Tensor> all{a.view(), b.view(), c.view()};
  const int64_t before = syncs();
  const double together = be->sum_squares(all);
  EXPECT_EQ(syncs() - before, 1);
  EXPECT_EQ(together, each);
  EXPECT_EQ(together, 15 * 0.25 + 7 * 1.5625);
  std::vector<double> apart(3);  // two models' norms from one wait (PPO's policy and value)
  const int64_t before_each = syncs();
  be->sum_squares_each(all, apart);
  EXPECT_EQ(syncs() - before_each, 1);
  EXPECT_EQ(apart, (std::vector<double>{15 * 0.25, 7 * 1.5625, 0.0}));
}

// A read queued with download_at_next_wait waits for nothing: its values arrive with the next
// wait the host makes anyway (here a gradient norm's), taken after it; src may be released and
// reused at once; finish_reads() then waits for nothing. Queued after that wait, a read is
// completed by finish_reads() itself, with one wait.
TEST_F(CudaEmulatedBackend, ReadAtTheNextWaitRidesOnThatWait) {
  Buffer a = f32({5}), b = f32({3});
  be->fill(a.view(), 2.5f);
  be->fill(b.view(), 1.0f);
  const int64_t before = syncs();
  auto early = be->download_at_next_wait(a.view());
  be->fill(a.view(), -7.0f);  // queued after the read: not what it sees
  EXPECT_EQ(syncs() - before, 0);
  ASSERT_EQ(early->size(), 5u);
  EXPECT_NE((*early)[0], 2.5f) << "the values arrived before any wait";
  EXPECT_EQ(be->sum_squares(b.view()), 3.0);  // the one wait
  EXPECT_EQ(syncs() - before, 1);
  EXPECT_EQ(*early, std::vector<float>(5, 2.5f));
  be->finish_reads();
  EXPECT_EQ(syncs() - before, 1) << "finish_reads waited with nothing pending";
  auto late = be->download_at_next_wait(a.view());
  a.reset();  // released before the copy ran: the stream orders the copy first
  be->finish_reads();
  EXPECT_EQ(syncs() - before, 2);
  EXPECT_EQ(*late, std::vector<float>(5, -7.0f));
}

// The embedding backward sorts its ids on the device and adds each id's rows in row order: the
// CPU backend's bits, for many rows (a sort of 1000 keys, padded to 1024) with many repeats and a
// padding id, without a wait.
TEST_F(CudaEmulatedBackend, EmbeddingBackwardSortsOnTheDeviceWithTheCpuBits) {
  const int64_t V = 37, d = 19, n = 1000, padding = 5;
  std::vector<int32_t> idv(static_cast<size_t>(n));
  std::vector<float> dxv(static_cast<size_t>(n * d)), tv(static_cast<size_t>(V * d));
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (int32_t& i : idv) i = static_cast<int32_t>(next() % (next() % 2 ? 3 : V));  // 0..2 often
  idv[7] = static_cast<int32_t>(padding);
  for (float& x : dxv) x = static_cast<float>(static_cast<int32_t>(next())) * 0x1p-31f;
  for (float& x : tv) x = static_cast<float>(static_cast<int32_t>(next())) * 0x1p-30f;
  std::unique_ptr<Backend> cpu = make_backend(BackendSpec{BackendKind::cpu, 0});
  Ledger cpu_ledger;
  Pool cpu_pool{cpu_ledger, *cpu};
  std::vector<std::vector<float>> got;
  for (Pool* p : {&pool, &cpu_pool}) {
    Buffer t = p->allocate(Category::other, DType::F32, Shape{V, d});
    Buffer dx = p->allocate(Category::other, DType::F32, Shape{n, d});
    Buffer ids = p->allocate(Category::other, DType::I32, Shape{n});
    upload_f32(t.view(), tv);
    upload_f32(dx.view(), dxv);
    upload_i32(ids.view(), idv);
    Backend& b = p == &pool ? *be : *cpu;
    b.synchronize();
    const int64_t before = syncs();
    b.embedding_backward(t.view(), dx.view(), ids.view(), padding);
    if (p == &pool) {
      EXPECT_EQ(syncs(), before);
    }
    got.push_back(download_f32(t.view()));
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
  for (int64_t j = 0; j < d; ++j) EXPECT_EQ(got[0][padding * d + j], tv[padding * d + j]);
}

TEST_F(CudaEmulatedBackend, BadIdReportedAtTheNextDownloadNamingIndexAndValue) {
  const int64_t V = 4, d = 8;
  Buffer table = f32({V, d}), x = f32({3, d});
  be->fill(table.view(), 1.0f);
  Buffer bad = i32({0, 7, 9});
  const int64_t before = syncs();
  be->embedding_forward(x.view(), bad.view(), table.view());  // no wait, no throw yet
  EXPECT_EQ(syncs(), before);
  try {
    download_f32(x.view());
    FAIL() << "the bad id was not reported";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 7 at position 1 outside the vocabulary of 4"),
              std::string::npos)
        << e.what();
  }
  // Reported once; the backend goes on working.
  Buffer good = i32({0, 1, 3});
  be->embedding_forward(x.view(), good.view(), table.view());
  EXPECT_EQ(download_f32(x.view())[0], 1.0f);
}

// The step's end reads the check records through synchronize(), not a download: the records
// must be copied back and the stream waited for before they are read there too (without that
// wait the record still holds no error when the host looks, and the bad id passes silently).
TEST_F(CudaEmulatedBackend, BadIdReportedAtTheNextSynchronisation) {
  const int64_t V = 4, d = 8;
  Buffer table = f32({V, d}), x = f32({3, d});
  be->fill(table.view(), 1.0f);
  Buffer bad = i32({0, 1, 5});
  be->embedding_forward(x.view(), bad.view(), table.view());
  try {
    be->synchronize();
    FAIL() << "the bad id was not reported by synchronize()";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("token id 5 at position 2 outside the vocabulary of 4"),
              std::string::npos)
        << e.what();
  }
  be->synchronize();  // reported once
}

TEST_F(CudaEmulatedBackend, CudaMallocFailureIsOutOfMemoryOnlyWhenTheRuntimeSaysSo) {
  // More than the arena's free space: a new segment, i.e. a cudaMalloc.
  const Shape big{int64_t{3} << 28};  // 3 GiB of floats
  cudaemu::inject_malloc_error(cudaErrorMemoryAllocation, 0);
  cudaemu::set_device_memory(size_t{2} << 30);  // every retry fails too
  EXPECT_THROW(f32(big), OutOfMemoryError);
  cudaemu::set_device_memory(size_t{16} << 30);
  // A sticky fault reported by cudaMalloc is not out of memory: it names the call and the last
  // kernel launched.
  Buffer x = f32({16});
  be->fill(x.view(), 1.0f);
  cudaemu::inject_malloc_error(cudaErrorIllegalAddress, 0);
  try {
    f32(big);
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    FAIL() << "reported as out of memory: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorIllegalAddress"), std::string::npos) << what;
    EXPECT_NE(what.find("last kernel launched: fill_kernel"), std::string::npos) << what;
  }
  cudaemu::reset_errors();
}

TEST_F(CudaEmulatedBackend, StickyFaultNamesTheLastKernelAtTheNextCall) {
  Buffer x = f32({16});
  be->fill(x.view(), 1.0f);
  cudaemu::inject_sticky_error(cudaErrorIllegalAddress, "test: an illegal address in a kernel");
  try {
    download_f32(x.view());
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaErrorIllegalAddress"), std::string::npos) << what;
    EXPECT_NE(what.find("last kernel launched: fill_kernel"), std::string::npos) << what;
  }
  cudaemu::reset_errors();
}

// The constructor's refusals: a device the machine does not have, and an attention kernel set
// that does not exist (both InputError: the user's setting, not a fault).
TEST(CudaEmulatedBackendStart, RefusesAMissingDeviceAndAMisspeltAttentionKernelSet) {
  try {
    make_backend(BackendSpec{BackendKind::cuda, 7});
    FAIL() << "device 7 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no device 7"), std::string::npos) << e.what();
  }
  ASSERT_EQ(setenv("STREAMBP_CUDA_ATTENTION", "wmma", 1), 0);
  try {
    make_backend(BackendSpec{BackendKind::cuda, 0});
    FAIL() << "STREAMBP_CUDA_ATTENTION=wmma accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'wmma' is not an attention kernel"), std::string::npos)
        << e.what();
  }
  ASSERT_EQ(setenv("STREAMBP_CUDA_ATTENTION", "simt", 1), 0);
  EXPECT_NO_THROW(make_backend(BackendSpec{BackendKind::cuda, 0}));
  unsetenv("STREAMBP_CUDA_ATTENTION");
}

// No usable driver or device (the emulated runtime reads STREAMBP_CUDA_EMULATION_DEVICES at
// start, so in a process of its own): one line naming the runtime's reason, a non-zero exit.
TEST(CudaEmulatedBackendStart, NoDeviceIsAnInputErrorNamingTheRuntimesReason) {
  const test::CommandResult r =
      test::run_command("STREAMBP_CUDA_EMULATION_DEVICES=0 " + test::streambp_binary() +
                        " gradcheck --model tiny-qwen3 --seq-len 8 --backend cuda");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cuda: no usable CUDA driver or device (no CUDA-capable device is "
                          "detected)"),
            std::string::npos)
      << r.output;
}

// zero() and poison() (fresh buffers in checked pools): every byte 0, every float NaN, on the
// stream, without a wait.
TEST_F(CudaEmulatedBackend, ZeroAndPoisonFillOnTheDevice) {
  Buffer x = f32({5, 7});
  be->fill(x.view(), 2.0f);
  const int64_t before = syncs();
  be->poison(x.view());
  EXPECT_EQ(syncs(), before);
  for (float v : download_f32(x.view())) EXPECT_TRUE(std::isnan(v));
  be->zero(x.view());
  for (float v : download_f32(x.view())) EXPECT_EQ(v, 0.0f);
}

// More checked calls than there are check records before any download: the backend reads the
// records it has (one wait) and goes on, and a bad index in a later call is still reported.
TEST_F(CudaEmulatedBackend, ChecksBeyondTheRecordsWaitOnceAndStillReport) {
  const int64_t V = 4, d = 8;
  Buffer table = f32({V, d}), x = f32({3, d});
  be->fill(table.view(), 1.0f);
  Buffer good = i32({0, 1, 3}), bad = i32({0, 4, 1});
  be->synchronize();
  const int64_t before = syncs();
  for (int i = 0; i < 300; ++i) be->embedding_forward(x.view(), good.view(), table.view());
  EXPECT_EQ(syncs() - before, 1);  // 256 records
  be->embedding_forward(x.view(), bad.view(), table.view());
  EXPECT_THROW(be->synchronize(), ShapeError);
}

}  // namespace
}  // namespace sbp

#else

TEST(CudaEmulation, NeedsTheEmulationBuild) {
  GTEST_SKIP() << "configure with -DSTREAMBP_CUDA_EMULATION=ON (scripts/build.sh emu)";
}

#endif
