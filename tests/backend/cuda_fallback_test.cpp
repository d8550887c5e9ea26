// The CUDA backend's second ways, where a real device or library may refuse what nothing the
// backend can ask beforehand predicts, on the emulated runtime told to refuse (emulator.h):
//  - gemm.cu: cuBLASLt's heuristic answers several algorithms, tried in order; the first ones
//    refused, the next runs the product (the right numbers), printed once and counted; all
//    refused: an error naming the call (shape, types, transposes, leading dimensions,
//    alignments) and each algorithm's answer;
//  - attention.cu: a tensor-core launch refused (its shared-memory opt-in, or the launch) runs
//    the fp32 kernels of that phase: the same bits as STREAMBP_CUDA_ATTENTION=simt for a refused
//    phase, the tensor cores' bits for the others; printed once, counted;
//  - STREAMBP_CUDA_ARENA=per_tensor: every tensor its own allocation, whose end a kernel cannot
//    pass unnoticed (what compute-sanitizer's memcheck needs on a GPU);
//  - uploads inside a sequence of ops go through pinned staging: no host wait.
// Only the emulation build (STREAMBP_CUDA_EMULATION) has them.
#include <gtest/gtest.h>

#if defined(STREAMBP_CUDA_EMULATION)

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/cuda_factory.h"
#include "backend/cuda/emulation/emulator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ledger.h"
#include "core/memory.h"
#include "core/pool.h"
#include "core/rng.h"

namespace sbp {
namespace {

std::unique_ptr<Backend> cuda_backend() { return make_backend(BackendSpec{BackendKind::cuda, 0}); }

struct Refusals : ::testing::Test {
  void TearDown() override {
    cudaemu::set_refused_algorithms(0);
    cudaemu::set_max_shared_memory(size_t{1} << 30);
    cudaemu::refuse_launches("");
    unsetenv("STREAMBP_CUDA_ATTENTION");
    unsetenv("STREAMBP_CUDA_ARENA");
    cudaemu::reset_errors();
  }
};
using CudaFallback = Refusals;

std::vector<float> random_values(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(scale * rng.normal()));  // exact in BF16
  return v;
}

// C (M, N) = A (M, K) B (N, K)^T in float64, and sum |a b| per element (the products' scale).
void reference(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t N,
               int64_t K, std::vector<double>* c, std::vector<double>* mag) {
  c->assign(static_cast<size_t>(M * N), 0.0);
  mag->assign(c->size(), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t p = 0; p < K; ++p) {
        const double x = double{a[i * K + p]} * b[j * K + p];
        (*c)[i * N + j] += x;
        (*mag)[i * N + j] += std::fabs(x);
      }
}

TEST_F(CudaFallback, GemmRunsTheNextAlgorithmAndNamesTheCallWhenNoneRuns) {
  const int64_t M = 5, N = 3, K = 7;
  const std::vector<float> a = random_values(M * K, 1), b = random_values(N * K, 2);
  std::vector<double> want, mag;
  reference(a, b, M, N, K, &want, &mag);
  cudaemu::set_refused_algorithms(3);
  {
    const auto be = cuda_backend();
    Ledger ledger;
    Pool pool(ledger, *be);
    Buffer A = pool.allocate(Category::other, DType::BF16, {M, K});
    Buffer B = pool.allocate(Category::other, DType::BF16, {N, K});
    Buffer C = pool.allocate(Category::other, DType::F32, {M, N});
    upload_f32(A.view(), a);
    upload_f32(B.view(), b);
    testing::internal::CaptureStderr();
    be->gemm(C.view(), A.view(), false, B.view(), true, 1.0f, 0.0f);
    const std::vector<float> got = download_f32(C.view());
    be->gemm(C.view(), A.view(), false, B.view(), true, 1.0f, 0.0f);  // the kept algorithm
    const std::string err = testing::internal::GetCapturedStderr();
    // BF16 products are exact; K additions of at most one ulp each (toward zero, emulation/
    // tensor_core_math.h): (K + 2) 2^-23 of the products' scale.
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(std::fabs(got[i] - want[i]), (K + 2) * std::ldexp(mag[i], -23)) << i;
    EXPECT_EQ(cuda_fallbacks(*be), 1);
    EXPECT_NE(err.find("gpu fallback: gemm C (5, 3) F32 = A (5, 7) BF16 x B^T, B (3, 7) BF16"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("cuBLASLt algorithm 4 of 8 ran"), std::string::npos) << err;
    EXPECT_EQ(err.find("gpu fallback", err.find("gpu fallback") + 1), std::string::npos)
        << "printed twice: " << err;
  }
  cudaemu::set_refused_algorithms(8);
  const auto be = cuda_backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  Buffer A = pool.allocate(Category::other, DType::BF16, {M, K});
  Buffer B = pool.allocate(Category::other, DType::BF16, {N, K});
  Buffer C = pool.allocate(Category::other, DType::F32, {M, N});
  try {
    be->gemm(C.view(), A.view(), false, B.view(), true, 1.0f, 1.0f);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part :
         {"refused every algorithm", "algorithm 8: CUBLAS_STATUS_NOT_SUPPORTED", "M = 5", "N = 3",
          "K = 7", "C (5, 3) F32", "A (5, 7) BF16", "B^T, B (3, 7) BF16", "beta != 0",
          "leading dimensions lda 7, ldb 7, ldc 3", "alignments A 256, B 256, C 256 bytes"})
      EXPECT_NE(what.find(part), std::string::npos) << part << " in: " << what;
  }
}

struct AttentionRun {
  std::vector<float> out, lse, dq, dk, dv;
};

// Attention forward and backward (head_dim 64, GQA, two segments) on a fresh CUDA backend; with
// `forward`, the backward from that run's out and lse instead of this backend's forward.
AttentionRun run_attention(int64_t* fallbacks, std::string* err,
                           const AttentionRun* forward = nullptr) {
  const int64_t n = 40, H = 2, G = 1, h = 64;
  const auto be = cuda_backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  auto buf = [&](int64_t rows, int64_t cols, uint64_t seed) {
    Buffer x = pool.allocate(Category::other, DType::F32, {rows, cols});
    upload_f32(x.view(), random_values(rows * cols, seed));
    return x;
  };
  Buffer q = buf(n, H * h, 3), k = buf(n, G * h, 4), v = buf(n, G * h, 5), dout = buf(n, H * h, 6);
  Buffer out = buf(n, H * h, 7), lse = buf(n, H, 8);
  Buffer dq = buf(n, H * h, 9), dk = buf(n, G * h, 10), dv = buf(n, G * h, 11);
  Buffer seg = pool.allocate(Category::other, DType::I32, {n});
  std::vector<int32_t> starts(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) starts[static_cast<size_t>(i)] = i < 17 ? 0 : 17;
  upload_i32(seg.view(), starts);
  AttentionDims dims{H, G, h, 1.0f / 8.0f, 0};
  testing::internal::CaptureStderr();
  if (forward) {
    upload_f32(out.view(), forward->out);
    upload_f32(lse.view(), forward->lse);
  } else {
    be->attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg.view(), 0,
                          dims);
  }
  be->attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                         v.view(), out.view(), lse.view(), seg.view(), 0, dims);
  AttentionRun r{download_f32(out.view()), download_f32(lse.view()), download_f32(dq.view()),
                 download_f32(dk.view()), download_f32(dv.view())};
  *err = testing::internal::GetCapturedStderr();
  *fallbacks = cuda_fallbacks(*be);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(CudaFallback, AttentionRunsTheFp32KernelsOfARefusedPhase) {
  int64_t fallbacks = 0;
  std::string err;
  ASSERT_EQ(setenv("STREAMBP_CUDA_ATTENTION", "simt", 1), 0);
  const AttentionRun simt = run_attention(&fallbacks, &err);
  unsetenv("STREAMBP_CUDA_ATTENTION");
  const AttentionRun tc = run_attention(&fallbacks, &err);
  EXPECT_EQ(fallbacks, 0);
  ASSERT_FALSE(same_bits(tc.out, simt.out)) << "the two kernel sets gave the same bits";
  // Every tensor-core kernel needs more than 48 KiB at head_dim 64 with the device's 4 warps;
  // the device refuses past that although its attribute says 227 KiB.
  cudaemu::set_max_shared_memory(48 * 1024);
  const AttentionRun refused = run_attention(&fallbacks, &err);
  EXPECT_EQ(fallbacks, 3);  // forward, dQ, dK/dV
  EXPECT_TRUE(same_bits(refused.out, simt.out));
  EXPECT_TRUE(same_bits(refused.lse, simt.lse));
  EXPECT_TRUE(same_bits(refused.dq, simt.dq));
  EXPECT_TRUE(same_bits(refused.dk, simt.dk));
  EXPECT_TRUE(same_bits(refused.dv, simt.dv));
  for (const char* line :
       {"gpu fallback: attention forward: tc_forward_kernel (head_dim 64, 2 heads, 1 kv heads, 4 "
        "warps, 61440 bytes of shared memory) refused: cudaErrorInvalidValue; the fp32 kernels "
        "ran instead at 40 query rows",
        "gpu fallback: attention backward dQ: tc_rows_backward_kernel<true>",
        "gpu fallback: attention backward dK/dV: tc_dkdv_kernel"})
    EXPECT_NE(err.find(line), std::string::npos) << line << " in: " << err;
  // Only the dK/dV launch refused (out of resources): that phase's bits are the fp32 kernels'
  // (from the tensor cores' forward), the others the tensor cores'.
  cudaemu::set_max_shared_memory(size_t{1} << 30);
  cudaemu::refuse_launches("tc_dkdv_kernel");
  const AttentionRun one = run_attention(&fallbacks, &err);
  EXPECT_EQ(fallbacks, 1);
  const std::string one_err = err;
  cudaemu::refuse_launches("");
  ASSERT_EQ(setenv("STREAMBP_CUDA_ATTENTION", "simt", 1), 0);
  const AttentionRun simt_on_tc = run_attention(&fallbacks, &err, &tc);
  unsetenv("STREAMBP_CUDA_ATTENTION");
  EXPECT_TRUE(same_bits(one.out, tc.out));
  EXPECT_TRUE(same_bits(one.dq, tc.dq));
  EXPECT_FALSE(same_bits(one.dk, tc.dk));
  EXPECT_TRUE(same_bits(one.dk, simt_on_tc.dk));
  EXPECT_TRUE(same_bits(one.dv, simt_on_tc.dv));
  err = one_err;
  EXPECT_NE(err.find("tc_dkdv_kernel (head_dim 64, 2 heads, 1 kv heads, 4 warps, 105984 bytes of "
                     "shared memory) refused: cudaErrorLaunchOutOfResources"),
            std::string::npos)
      << err;
}

__global__ void read_past_kernel(float* out, const float* x, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = x[n];  // one element past x's end
}

// With STREAMBP_CUDA_ARENA=per_tensor each tensor is an allocation of its own (the arena's peak
// reserved is the tensors' bytes, not a 1 GiB segment), and a kernel reading past a tensor whose
// size is a multiple of 256 bytes faults there; in the default arena the same read lands in the
// next tensor unnoticed.
TEST_F(CudaFallback, PerTensorArenaGivesEachTensorItsBounds) {
  ASSERT_EQ(setenv("STREAMBP_CUDA_ARENA", "per_tensor", 1), 0);
  {
    const auto be = cuda_backend();
    const int64_t reserved = cuda_device_peak_reserved(*be);
    Ledger ledger;
    Pool pool(ledger, *be);
    Buffer x = pool.allocate(Category::other, DType::F32, {64});
    EXPECT_EQ(cuda_device_peak_reserved(*be), reserved + 256);
    be->fill(x.view(), 1.0f);
    EXPECT_EQ(download_f32(x.view())[63], 1.0f);
  }
  ASSERT_EQ(setenv("STREAMBP_CUDA_ARENA", "pooled", 1), 0);
  try {
    cuda_backend();
    FAIL() << "STREAMBP_CUDA_ARENA=pooled accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'pooled' is not an arena placement"), std::string::npos)
        << e.what();
  }
  ASSERT_EQ(setenv("STREAMBP_CUDA_ARENA", "per_tensor", 1), 0);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const auto be = cuda_backend();
        Ledger ledger;
        Pool pool(ledger, *be);
        Buffer x = pool.allocate(Category::other, DType::F32, {64});
        Buffer y = pool.allocate(Category::other, DType::F32, {64});
        cudaemu::launch("read_past", read_past_kernel, dim3(1), dim3(32), 0, nullptr,
                        static_cast<float*>(y.view().data), static_cast<const float*>(x.view().data),
                        64);
        cudaDeviceSynchronize();
      },
      "a kernel accessed .* past the end of the device allocation");
}

// Uploads between ops (index tensors, rows) go through pinned staging: a sequence of ops with
// uploads in it waits for the device not once.
TEST_F(CudaFallback, UploadsBetweenOpsDoNotWait) {
  const auto be = cuda_backend();
  Ledger ledger;
  Pool pool(ledger, *be);
  Buffer x = pool.allocate(Category::other, DType::F32, {1000});
  Buffer y = pool.allocate(Category::other, DType::F32, {1000});
  be->fill(x.view(), 1.0f);
  be->synchronize();
  const int64_t before = cudaemu::counters().syncs;
  for (int i = 0; i < 50; ++i) {
    be->fill(x.view(), static_cast<float>(i));
    upload_f32(y.view(), std::vector<float>(1000, static_cast<float>(2 * i)));
    be->add_inplace(x.view(), y.view());
  }
  EXPECT_EQ(cudaemu::counters().syncs - before, 0) << "an upload waited for the device";
  const std::vector<float> got = download_f32(x.view());
  EXPECT_EQ(got[0], 49.0f + 98.0f);
  EXPECT_EQ(got[999], 49.0f + 98.0f);
}

}  // namespace
}  // namespace sbp

#else

TEST(CudaFallback, NeedsTheEmulationBuild) {
  GTEST_SKIP() << "configure with -DSTREAMBP_CUDA_EMULATION=ON (scripts/build.sh emu)";
}

#endif
