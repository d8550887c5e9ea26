// The emulated cuBLASLt (cublasLt.h): descriptors, a heuristic that offers up to 8 algorithms
// (the same arithmetic; the first STREAMBP_CUDA_EMULATION_REFUSE_ALGOS of them refused at
// cublasLtMatmul, emulator.h), and cublasLtMatmul queued on its stream like any kernel. Written from cuBLASLt's documentation
// (column-major layouts, op(A) is m x k, op(B) k x n, C and D m x n), independently of the
// backend's row-major mapping in gemm_plan.h.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cublasLt.h"
#include "emulator.h"
#include "runtime_internal.h"
#include "tensor_core_math.h"

struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int pointer_mode = 0;  // host
  int epilogue = 1;      // CUBLASLT_EPILOGUE_DEFAULT
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int order = CUBLASLT_ORDER_COL;
  int batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // documented default: 256 bytes
};

namespace {

constexpr int kMaxAlgos = 8;  // what the heuristic offers at most
constexpr uint64_t kMark = 0x5b9;  // algo.data[4]: an algorithm from this heuristic

// The emulated library's state: how many of every heuristic answer's algorithms fail.
int& refused_algos() {
  static int n = [] {
    const char* v = std::getenv("STREAMBP_CUDA_EMULATION_REFUSE_ALGOS");
    return v ? std::atoi(v) : 0;
  }();
  return n;
}

using Desc = cublasLtMatmulDescOpaque_t;
using Layout = cublasLtMatrixLayoutOpaque_t;

size_t type_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_8I: return 1;
    case CUDA_R_32I: return 4;
  }
  return 0;
}

// cublasLtMatmul's table of supported (compute, scale, A/B, C/D) types, for the real types.
bool supported(const Desc& op, cudaDataType_t ab_a, cudaDataType_t ab_b, cudaDataType_t c,
               cudaDataType_t d) {
  if (ab_a != ab_b || c != d) return false;
  const cudaDataType_t ab = ab_a;
  switch (op.compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      return op.scale == CUDA_R_16F && ab == CUDA_R_16F && c == CUDA_R_16F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (op.scale != CUDA_R_32F) return false;
      if (ab == CUDA_R_32F) return c == CUDA_R_32F;
      if (ab == CUDA_R_16BF) return c == CUDA_R_16BF || c == CUDA_R_32F;
      if (ab == CUDA_R_16F) return c == CUDA_R_16F || c == CUDA_R_32F;
      return false;
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return op.scale == CUDA_R_32F && ab == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
      return op.scale == CUDA_R_64F && ab == CUDA_R_64F && c == CUDA_R_64F;
    default:
      return false;
  }
}

// The shapes agree: op(A) m x k, op(B) k x n, C = D = m x n, ld >= rows, batches consistent.
bool shapes_ok(const Desc& op, const Layout& a, const Layout& b, const Layout& c, const Layout& d) {
  for (const Layout* l : {&a, &b, &c, &d})
    if (l->order != CUBLASLT_ORDER_COL || l->ld < static_cast<int64_t>(l->rows) || l->ld < 1 ||
        l->batch < 1)
      return false;
  const uint64_t m = d.rows, n = d.cols;
  const uint64_t a_rows = op.transa == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t k = op.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t b_rows = op.transb == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t b_cols = op.transb == CUBLAS_OP_N ? b.cols : b.rows;
  if (op.transa == CUBLAS_OP_C || op.transb == CUBLAS_OP_C) return false;  // real types only
  return a_rows == m && b_rows == k && b_cols == n && c.rows == m && c.cols == n &&
         a.batch == d.batch && b.batch == d.batch && c.batch == d.batch;
}

float bf16_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float round_tf32(float f) {  // to nearest, 10 explicit mantissa bits
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, 4);
  return f;
}

double load(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_64F: return static_cast<const double*>(p)[i];
    case CUDA_R_16BF: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16F: return static_cast<float>(static_cast<const _Float16*>(p)[i]);
    default: return 0.0;
  }
}
void store(void* p, cudaDataType_t t, int64_t i, double v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case CUDA_R_64F: static_cast<double*>(p)[i] = v; break;
    case CUDA_R_16BF: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case CUDA_R_16F: static_cast<_Float16*>(p)[i] = static_cast<_Float16>(static_cast<float>(v)); break;
    default: break;
  }
}

// An input element as the compute type reads it.
float operand(const void* p, cudaDataType_t t, int64_t i, cublasComputeType_t compute) {
  const float v = static_cast<float>(load(p, t, i));
  if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) return round_tf32(v);
  if (compute == CUBLAS_COMPUTE_32F_FAST_16BF) return bf16_to_f32(f32_to_bf16(v));
  if (compute == CUBLAS_COMPUTE_32F_FAST_16F) return static_cast<float>(static_cast<_Float16>(v));
  return v;
}

unsigned alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  unsigned al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = new Desc{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  auto get = [&](auto& field) {
    if (bytes != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return get(desc->compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return get(desc->scale);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return get(desc->pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(desc->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(desc->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t e = 0;
      if (bytes != sizeof e) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&e, buf, bytes);
      desc->epilogue = static_cast<int>(e);
      return CUBLAS_STATUS_SUCCESS;
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // not emulated
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = nullptr;
  if (type_bytes(type) == 0) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new Layout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  auto get = [&](auto& field) {
    if (bytes != sizeof field) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return get(l->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return get(l->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return get(l->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return get(l->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return get(l->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return get(l->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return get(l->stride);
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return bytes == sizeof(uint32_t) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// Up to kMaxAlgos algorithms for every supported problem, all computing the same way; each
// remembers the alignments it was chosen for (data[0..3]) and its place in the answer (data[5]),
// so that cublasLtMatmul can refuse a call whose pointers are less aligned than promised, as a
// real kernel picked for them would misbehave, and the first refused_algos() of an answer.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  *returned = 0;
  if (!handle || !op || !a || !b || !c || !d || !pref || requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(*op, a->type, b->type, c->type, d->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!shapes_ok(*op, *a, *b, *c, *d)) return CUBLAS_STATUS_INVALID_VALUE;
  // Every operand must be at least element-aligned; the real library has no kernel otherwise.
  const cudaDataType_t types[4] = {a->type, b->type, c->type, d->type};
  for (int i = 0; i < 4; ++i)
    if (pref->align[i] < type_bytes(types[i])) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int n = requested < kMaxAlgos ? requested : kMaxAlgos;
  for (int k = 0; k < n; ++k) {
    cublasLtMatmulHeuristicResult_t& r = results[k];
    std::memset(&r, 0, sizeof r);
    for (int i = 0; i < 4; ++i) r.algo.data[i] = pref->align[i];
    r.algo.data[4] = kMark;
    r.algo.data[5] = static_cast<uint64_t>(k);
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
  }
  *returned = n;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  using namespace sbp::cudaemu;
  if (!handle || !op || !a || !b || !c || !d || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(*op, a->type, b->type, c->type, d->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!shapes_ok(*op, *a, *b, *c, *d)) return CUBLAS_STATUS_INVALID_VALUE;
  if (op->pointer_mode != 0 || op->epilogue != 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  // In place (C == D) needs C's layout to be D's (documented).
  if (C == D && (c->ld != d->ld || c->type != d->type || c->order != d->order))
    return CUBLAS_STATUS_INVALID_VALUE;
  const void* ptrs[4] = {A, B, C, D};
  const cudaDataType_t types[4] = {a->type, b->type, c->type, d->type};
  for (int i = 0; i < 4; ++i) {
    if (alignment(ptrs[i]) < type_bytes(types[i])) return CUBLAS_STATUS_INVALID_VALUE;
    if (algo && algo->data[4] == kMark && alignment(ptrs[i]) < algo->data[i])
      return CUBLAS_STATUS_INVALID_VALUE;  // the algorithm was chosen for a larger alignment
  }
  if (algo && algo->data[4] == kMark && algo->data[5] < static_cast<uint64_t>(refused_algos()))
    return CUBLAS_STATUS_NOT_SUPPORTED;  // told to refuse (emulator.h)
  (void)workspace;
  (void)workspace_bytes;
  const Desc o = *op;
  const Layout la = *a, lb = *b, lc = *c, ld = *d;
  const uint64_t m = ld.rows, n = ld.cols, k = o.transa == CUBLAS_OP_N ? la.cols : la.rows;
  // Every byte an operand's layout can touch must be device memory.
  auto span = [](const Layout& l) {
    return (static_cast<uint64_t>(l.ld) * (l.cols - 1) + l.rows) * type_bytes(l.type) +
           static_cast<uint64_t>(l.batch - 1) * static_cast<uint64_t>(l.stride) * type_bytes(l.type);
  };
  const float fa = op->scale == CUDA_R_64F ? static_cast<float>(*static_cast<const double*>(alpha))
                                           : *static_cast<const float*>(alpha);
  const float fb = op->scale == CUDA_R_64F ? static_cast<float>(*static_cast<const double*>(beta))
                                           : *static_cast<const float*>(beta);
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if ((k > 0 && (!device_range(A, span(la)) || !device_range(B, span(lb)))) ||
      !device_range(D, span(ld)) || (fb != 0.0f && !device_range(C, span(lc))))
    return CUBLAS_STATUS_INVALID_VALUE;
  // BF16/FP16 operands and the FAST_* compute types run on the tensor cores: one instruction per
  // `chunk` of k (16 for 16-bit operands, 8 for TF32), its products summed as
  // tensor_core_math.h says; FP32 operands with CUBLAS_COMPUTE_32F on the CUDA cores, fused
  // multiply-adds in k order.
  const bool tensor_cores = o.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                            o.compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                            o.compute == CUBLAS_COMPUTE_32F_FAST_16F || la.type == CUDA_R_16BF ||
                            la.type == CUDA_R_16F;
  const uint64_t chunk = o.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? 8 : 16;
  enqueue_op(stream, "cublasLtMatmul", [=] {
    // op(A) as (m, k) and op(B)^T as (n, k), row-major, in the values the compute type reads.
    std::vector<float> a(m * k), bt(n * k);
    for (int64_t batch = 0; batch < ld.batch; ++batch) {
      const int64_t oa = batch * la.stride, ob = batch * lb.stride, oc = batch * lc.stride,
                    od = batch * ld.stride;
      for (uint64_t i = 0; i < m; ++i)
        for (uint64_t p = 0; p < k; ++p)
          a[i * k + p] = operand(A, la.type,
                                 oa + static_cast<int64_t>(o.transa == CUBLAS_OP_N ? i + p * la.ld
                                                                                   : p + i * la.ld),
                                 o.compute);
      for (uint64_t j = 0; j < n; ++j)
        for (uint64_t p = 0; p < k; ++p)
          bt[j * k + p] = operand(B, lb.type,
                                  ob + static_cast<int64_t>(o.transb == CUBLAS_OP_N ? p + j * lb.ld
                                                                                    : j + p * lb.ld),
                                  o.compute);
      std::vector<float> acc(m);
      for (uint64_t j = 0; j < n; ++j) {
        const float* y = bt.data() + j * k;
        if (tensor_cores) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (uint64_t p = 0; p < k; p += chunk)
            sbp::cudaemu::tc::mma_dot_rows(acc.data(), a.data() + p, static_cast<int64_t>(k),
                                           y + p, static_cast<int64_t>(m),
                                           static_cast<int>(std::min(chunk, k - p)));
        }
        for (uint64_t i = 0; i < m; ++i) {
          float sum = 0.0f;
          if (tensor_cores) {
            sum = acc[i];
          } else {
            const float* x = a.data() + i * k;
            for (uint64_t p = 0; p < k; ++p) sum = std::fma(x[p], y[p], sum);
          }
          float v = fa * sum;
          const int64_t at = static_cast<int64_t>(i + j * static_cast<uint64_t>(lc.ld));
          if (fb != 0.0f) v = std::fma(fb, static_cast<float>(load(C, lc.type, oc + at)), v);
          store(D, ld.type, od + static_cast<int64_t>(i + j * static_cast<uint64_t>(ld.ld)), v);
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

namespace sbp::cudaemu {
void set_refused_algorithms(int n) { refused_algos() = n; }
}  // namespace sbp::cudaemu
