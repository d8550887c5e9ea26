// Dense products through cuBLASLt: fp32 compute and accumulation (CUBLAS_COMPUTE_32F, never
// TF32), alpha and beta in fp32, a workspace taken once (cuda_backend.cu). BF16 operands run on
// the tensor cores; an F32 operand beside a BF16 one is split into bf16 parts, one call per
// part (gemm_plan.h says why and what each dtype mix becomes, gemm_split.h how a value splits).
//
// Algorithms: cuBLASLt's heuristic is asked for up to kAlgos of them at a problem's first call,
// and they are tried in its order until cublasLtMatmul takes one (a kernel may refuse what its
// heuristic entry did not exclude: an odd alignment, N = 1, a 2-byte view); the one that ran is
// kept for the problem. A second or later one is a fallback (printed once, counted:
// CudaBackend::note_fallback). None: an sbp::Error naming the call (gemm_describe.h) and what
// each algorithm answered, instead of "cuBLAS status 15".
//
// Row-major to cuBLASLt's column-major: a row-major (r, c) matrix is the column-major (c, r)
// matrix of its transpose, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T with B's
// memory as cuBLASLt's first operand: m = N, n = M, k = K.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_ptr.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/gemm_describe.h"
#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/gemm_split.h"

namespace sbp {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // as allocated in cuda_backend.cu
constexpr int kAlgos = 8;  // cuBLASLt algorithms asked for, tried in order

const char* type_name(cudaDataType t) { return t == CUDA_R_16BF ? "BF16" : "F32"; }

__global__ void widen_kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = cuda::bf16_to_float(src[i]);
}
// parts + p * stride (n) = part p of src (n), p < kSplitParts (gemm_split.h).
__global__ void split_kernel(uint16_t* parts, int64_t stride, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const cuda::Bf16Parts s = cuda::split_bf16(src[i]);
    for (int p = 0; p < cuda::kSplitParts; ++p) parts[p * stride + i] = s.p[p];
  }
}
__global__ void narrow_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = cuda::float_to_bf16(src[i]);
}

// Owns the four cuBLASLt descriptors of one call.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~LtCall() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

// Row-major C (M, N) (ldc) = alpha op(A) op(B) + beta C; A (lda), B (ldb) row-major of type tab.
void CudaBackend::gemm_lt(void* C, cudaDataType tc, int64_t ldc, const void* A, cudaDataType tab,
                          int64_t lda, bool trans_a, const void* B, int64_t ldb, bool trans_b,
                          int64_t M, int64_t N, int64_t K, float alpha, float beta) {
  LtCall call;
  SBP_CUBLAS(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's first operand is B's memory, its second A's (see the top of this file).
  const cublasOperation_t op1 = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // = lt_problem's trans1
  const cublasOperation_t op2 = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // = trans2
  SBP_CUBLAS(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1));
  SBP_CUBLAS(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2));
  // Column-major layouts of the memory as stored (gemm_plan.h, tested on the CPU).
  const cuda::LtProblem lp = cuda::lt_problem(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  SBP_CUBLAS(cublasLtMatrixLayoutCreate(&call.a, tab, lp.first.rows, lp.first.cols, lp.first.ld));
  SBP_CUBLAS(cublasLtMatrixLayoutCreate(&call.b, tab, lp.second.rows, lp.second.cols, lp.second.ld));
  SBP_CUBLAS(cublasLtMatrixLayoutCreate(&call.c, tc, lp.c.rows, lp.c.cols, lp.c.ld));

  const unsigned al_a = cuda::alignment_of(B), al_b = cuda::alignment_of(A),
                 al_c = cuda::alignment_of(C);
  const GemmKey key{static_cast<int>(tc), static_cast<int>(tab), trans_a, trans_b, M, N, K, lda, ldb,
                    ldc, static_cast<int>(al_a * 1000000 + al_b * 1000 + al_c), beta != 0.0f};
  const cuda::GemmCall what{M, N, K, type_name(tab), type_name(tc), trans_a, trans_b, lda, ldb,
                            ldc, al_b, al_a, al_c, beta != 0.0f};
  auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(lt_, call.op, &alpha, B, call.a, A, call.b, &beta, C, call.c, C, call.c,
                          &algo, workspace_, kWorkspaceBytes, stream_);
  };
  if (const auto it = algos_.find(key); it != algos_.end()) {
    const cublasStatus_t s = matmul(it->second);
    if (s != CUBLAS_STATUS_SUCCESS)
      throw Error("gemm: cublasLtMatmul: " + cuda::cublas_status_name(s) + " for " +
                  cuda::describe(what) + " (with the algorithm that ran it before)");
    return;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  SBP_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  const uint32_t a32 = al_a, b32 = al_b, c32 = al_c;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32,
                                       sizeof a32);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32,
                                       sizeof b32);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c32,
                                       sizeof c32);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c32,
                                       sizeof c32);
  // Split-K only with fp32 partials reduced in a separate pass (COMPUTE_TYPE): reducing "in
  // place" or in the output type would round a BF16 C more than once, and in-place reduction
  // orders its additions by arrival (not reproducible).
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                       sizeof schemes);
  cublasLtMatmulHeuristicResult_t results[kAlgos] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      lt_, call.op, call.a, call.b, call.c, call.c, pref, kAlgos, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found <= 0)
    throw Error("gemm: cuBLASLt's heuristic offers no algorithm (" +
                (st != CUBLAS_STATUS_SUCCESS ? cuda::cublas_status_name(st)
                                             : std::string("none returned")) +
                ") for " + cuda::describe(what));
  // Tried in the heuristic's order; a refusal launches nothing, so the next may run.
  std::string refused;
  for (int i = 0; i < found && i < kAlgos; ++i) {
    const cublasStatus_t s = results[i].state != CUBLAS_STATUS_SUCCESS ? results[i].state
                                                                        : matmul(results[i].algo);
    if (s == CUBLAS_STATUS_SUCCESS) {
      algos_.emplace(key, results[i].algo);
      if (i > 0)
        note_fallback("gemm " + cuda::describe(what) + ": cuBLASLt algorithm " +
                      std::to_string(i + 1) + " of " + std::to_string(found) +
                      " ran after refusals (" + refused + ")");
      return;
    }
    refused += (refused.empty() ? "" : ", ") + std::string("algorithm ") + std::to_string(i + 1) +
               ": " + cuda::cublas_status_name(s);
  }
  throw Error("gemm: cuBLASLt refused every algorithm its heuristic offered (" + refused +
              ") for " + cuda::describe(what));
}

void CudaBackend::gemm_impl(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B,
                            bool trans_b, float alpha, float beta, const Tensor& scratch) {
  // A viewed as (rows, cols); op(A) is (M, K), op(B) is (K, N), C is (M, N).
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t N = trans_b ? B.rows() : B.cols();
  flops_ += 2 * M * N * K;  // the product's, not the calls' (a split runs it once per part)
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta C, no product; beta = 0 overwrites (NaN included)
    if (beta == 0.0f)
      fill_impl(C, 0.0f);
    else if (beta != 1.0f)
      scale_inplace_impl(C, beta);
    return;
  }
  const cuda::GemmPlan plan =
      cuda::plan_gemm(A.dtype, B.dtype, C.dtype, A.numel(), B.numel(), C.numel());
  SBP_CHECK(static_cast<int64_t>(scratch.nbytes()) >= plan.scratch.total(),
            "gemm: conversion scratch of " + std::to_string(scratch.nbytes()) + " bytes, " +
                std::to_string(plan.scratch.total()) + " needed");
  auto* base = static_cast<char*>(scratch.data);

  // The split operand's parts, each laid out as the operand (same leading dimension).
  const Tensor* split = plan.split == cuda::SplitOperand::a   ? &A
                        : plan.split == cuda::SplitOperand::b ? &B
                                                              : nullptr;
  if (split) {
    const int64_t n = split->numel();
    SBP_LAUNCH(split_kernel, cuda::grid_for(n, 256), 256, 0, stream_,
               reinterpret_cast<uint16_t*>(base), plan.scratch.part_stride / 2,
               static_cast<const float*>(split->data), n);
  }
  void* c = C.data;
  if (plan.widen_c) {
    c = base + plan.scratch.c_offset();
    if (beta != 0.0f) {  // beta = 0: cuBLASLt does not read C
      SBP_LAUNCH(widen_kernel, cuda::grid_for(C.numel(), 256), 256, 0, stream_,
                 static_cast<float*>(c), static_cast<const uint16_t*>(C.data), C.numel());
    }
  }
  const cudaDataType tab = plan.operands_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType tc = plan.c_bf16 ? CUDA_R_16BF : CUDA_R_32F;
  for (int i = 0; i < plan.calls; ++i) {
    const void* part = split ? base + cuda::part_of_call(plan, i) * plan.scratch.part_stride
                             : nullptr;
    const void* a = plan.split == cuda::SplitOperand::a ? part : A.data;
    const void* b = plan.split == cuda::SplitOperand::b ? part : B.data;
    gemm_lt(c, tc, N, a, tab, A.cols(), trans_a, b, B.cols(), trans_b, M, N, K, alpha,
            cuda::beta_of_call(beta, i));
  }
  if (plan.widen_c) {
    SBP_LAUNCH(narrow_kernel, cuda::grid_for(C.numel(), 256), 256, 0, stream_,
               static_cast<uint16_t*>(C.data), static_cast<const float*>(c), C.numel());
  }
}

}  // namespace sbp
