// Backend's public operations: check the call against the contract written in backend.h, then
// run the backend's implementation. Every check of a call's shapes, dtypes and scalars is here,
// so that every backend (the shape-only planner included) rejects the same misuse.
//
// Messages name the op, the argument and its dtype(shape): "rmsnorm_forward: g F32(7) ...".
// They are built only on failure (SBP_CHECK evaluates its message lazily), so the checks cost
// a few comparisons per call.
#include "backend/backend.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend_checks.h"
#include "backend/gemm_scratch.h"

namespace sbp {

namespace contract {

std::string num(int64_t v) { return std::to_string(v); }
std::string num(float v) {  // %g: "1e-08", "nan", "inf" (std::to_string would print 0.000000)
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

// "<op>: <arg> <dtype(shape)>"
std::string arg(const char* op, const char* name, const Tensor& t) {
  return std::string(op) + ": " + name + " " + t.describe();
}

// Bytes of a tensor, for the profile's estimate of the memory an op moves.
int64_t nb(const Tensor& t) { return static_cast<int64_t>(t.nbytes()); }
// Index tensors (I32) and per-row statistics and accumulators (F32).
void check_dtype(const char* op, const char* name, const Tensor& t, DType dt) {
  SBP_CHECK(t.defined() && t.dtype == dt,
            arg(op, name, t) + " must be an " + dtype_name(dt) + " tensor");
}
// Doubles carried in an F32 tensor (there is no F64 dtype): an even number of elements, at
// least 2, 8-byte aligned where the tensor has an address.
void check_double_parts(const char* op, const char* name, const Tensor& t) {
  check_dtype(op, name, t, DType::F32);
  SBP_CHECK(t.numel() >= 2 && t.numel() % 2 == 0 &&
                reinterpret_cast<uintptr_t>(t.data) % alignof(double) == 0,
            arg(op, name, t) + " must hold doubles: an even number of F32, 8-byte aligned");
}

// A per-row vector of a call with n rows.
void check_rows_vector(const char* op, const char* name, const Tensor& t, DType dt, int64_t n) {
  check_dtype(op, name, t, dt);
  SBP_CHECK(t.numel() == n, arg(op, name, t) + " must have one entry per row (n = " + num(n) + ")");
}
// A per-row table of a call with n rows: F32 (n, width), e.g. the objectives' per-row constants.
void check_rows_table(const char* op, const char* name, const Tensor& t, int64_t n, int width) {
  SBP_CHECK(t.defined() && t.dtype == DType::F32 && t.rows() == n && t.cols() == width &&
                t.numel() == n * width,
            arg(op, name, t) + " must be F32 (" + num(n) + ", " + num(int64_t{width}) + ")");
}

}  // namespace contract

using namespace contract;

namespace {

// The rope table rows an op reads: one (h) F32 row per row of x.
int64_t rope_rows(const Tensor& x, const Tensor& table) {
  return x.rows() * table.cols() * static_cast<int64_t>(sizeof(float));
}

bool is_float(DType dt) { return dt == DType::F32 || dt == DType::BF16; }

// Activations, weights, weight gradients, logits: F32 or BF16.
void check_float(const char* op, const char* name, const Tensor& t) {
  SBP_CHECK(t.defined() && is_float(t.dtype), arg(op, name, t) + " must be an F32 or BF16 tensor");
}
// t has the shape (rows, cols) of `like`, e.g. out and dq like q (n, H*h).
void check_like(const char* op, const char* name, const Tensor& t, const char* like_name,
                const Tensor& like) {
  check_float(op, name, t);
  SBP_CHECK(t.rows() == like.rows() && t.cols() == like.cols(),
            arg(op, name, t) + " must have the shape of " + like_name + " " + like.describe());
}
void check_same_numel(const char* op, const char* name, const Tensor& t, const char* like_name,
                      const Tensor& like) {
  check_float(op, name, t);
  SBP_CHECK(t.numel() == like.numel(),
            arg(op, name, t) + " must have the numel of " + like_name + " " + like.describe());
}
void check_finite(const char* op, const char* name, float x) {
  SBP_CHECK(std::isfinite(x), std::string(op) + ": " + name + " = " + num(x) + " is not finite");
}
void check_eps(const char* op, float eps) {
  SBP_CHECK(std::isfinite(eps) && eps >= 0.0f,
            std::string(op) + ": eps = " + num(eps) + " must be finite and >= 0");
}

// ---- per op ----

void check_gemm(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                float alpha, float beta) {
  const char* op = "gemm";
  check_float(op, "C", C);
  check_float(op, "A", A);
  check_float(op, "B", B);
  // A viewed as (rows, cols); op(A) is (M, K), op(B) is (K, N), C is (M, N).
  const int64_t M = trans_a ? A.cols() : A.rows();
  const int64_t K = trans_a ? A.rows() : A.cols();
  const int64_t Kb = trans_b ? B.cols() : B.rows();
  const int64_t N = trans_b ? B.rows() : B.cols();
  SBP_CHECK(K == Kb && C.rows() == M && C.cols() == N,
            std::string("gemm: C ") + C.describe() + (trans_a ? " = A^T " : " = A ") +
                A.describe() + (trans_b ? " B^T " : " B ") + B.describe() +
                ": op(A) must be (M, K), op(B) (K, N) and C (M, N)");
  check_finite(op, "alpha", alpha);
  check_finite(op, "beta", beta);
}

void check_rmsnorm(const char* op, const Tensor& x, const Tensor& g, float eps) {
  const int64_t d = g.numel();  // x viewed as (rows, d)
  SBP_CHECK(d > 0 && x.numel() % d == 0,
            arg(op, "x", x) + " must be a whole number of rows of g " + g.describe());
  check_eps(op, eps);
}

// table (P, h) F32, h even and > 0.
void check_rope_table(const char* op, const Tensor& table) {
  check_dtype(op, "table", table, DType::F32);
  const int64_t h = table.cols();
  SBP_CHECK(table.shape.ndim == 2 && h > 0 && h % 2 == 0,
            arg(op, "table", table) + " must be (P, h) with h even and > 0");
}

void check_rope(const char* op, const Tensor& x, const Tensor& positions, const Tensor& table) {
  check_float(op, "x", x);
  check_rope_table(op, table);
  SBP_CHECK(x.cols() % table.cols() == 0,
            arg(op, "x", x) + " must be (n, heads * h) for table " + table.describe());
  check_rows_vector(op, "positions", positions, DType::I32, x.rows());
}

void check_dims(const char* op, const AttentionDims& dims) {
  SBP_CHECK(dims.n_heads > 0 && dims.n_kv_heads > 0 && dims.head_dim > 0,
            std::string(op) + ": heads H=" + num(dims.n_heads) + ", G=" + num(dims.n_kv_heads) +
                " and head_dim " + num(dims.head_dim) + " must be positive");
  SBP_CHECK(dims.n_heads % dims.n_kv_heads == 0,
            std::string(op) + ": H=" + num(dims.n_heads) +
                " query heads is not a multiple of G=" + num(dims.n_kv_heads) + " kv heads");
  SBP_CHECK(std::isfinite(dims.scale),
            std::string(op) + ": softmax scale " + num(dims.scale) + " is not finite");
  SBP_CHECK(dims.window >= 0, std::string(op) + ": sliding window " + num(dims.window) +
                                  " must be >= 0 (0: no window)");
}

// What forward and backward share: q, k, v, out, lse, seg_start, q_offset, dims.
void check_attention(const char* op, const Tensor& out, const Tensor& lse, const Tensor& q,
                     const Tensor& k, const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                     const AttentionDims& dims) {
  check_dims(op, dims);
  const int64_t H = dims.n_heads, Hh = dims.n_heads * dims.head_dim;
  const int64_t Gh = dims.n_kv_heads * dims.head_dim;
  check_float(op, "q", q);
  check_float(op, "k", k);
  check_float(op, "v", v);
  const int64_t n = q.rows(), tk = k.rows();
  SBP_CHECK(q.cols() == Hh, arg(op, "q", q) + " must have H*h = " + num(Hh) + " columns");
  SBP_CHECK(
      k.cols() == Gh && v.rows() == tk && v.cols() == Gh,
      arg(op, "k", k) + " and v " + v.describe() + " must both be (Tk, G*h = " + num(Gh) + ")");
  check_like(op, "out", out, "q", q);
  check_dtype(op, "lse", lse, DType::F32);
  SBP_CHECK(lse.rows() == n && lse.cols() == H,
            arg(op, "lse", lse) + " must be (n=" + num(n) + ", H=" + num(H) + ")");
  const int64_t k0 = dims.k_offset;
  SBP_CHECK(k0 >= 0 && k0 < std::numeric_limits<int32_t>::max(),
            std::string(op) + ": key offset " + num(k0) + " must be in [0, 2^31)");
  SBP_CHECK(q_offset >= 0 && q_offset <= k0 + tk - n,
            std::string(op) + ": queries [" + num(q_offset) + ", " + num(q_offset + n) +
                ") must lie within the key rows [" + num(k0) + ", " + num(k0 + tk) + ")");
  // A key offset leaves out keys [0, k0): allowed only where no query row can see them.
  SBP_CHECK(k0 == 0 || (dims.window > 0 && k0 <= q_offset - dims.window + 1),
            std::string(op) + ": key offset " + num(k0) + " needs a sliding window with k0 <= " +
                "q_offset - window + 1 (q_offset " + num(q_offset) + ", window " +
                num(dims.window) + "): queries would see keys below it");
  SBP_CHECK(
      k0 + tk < std::numeric_limits<int32_t>::max(),
      arg(op, "k", k) + ": key rows up to " + num(k0 + tk) + " do not fit the I32 segment starts");
  check_dtype(op, "seg_start", seg_start, DType::I32);
  SBP_CHECK(seg_start.numel() >= q_offset + n,
            arg(op, "seg_start", seg_start) +
                " must have at least q_offset + n = " + num(q_offset + n) + " entries");
}

// logits (n, V) float with V > 0.
void check_logits(const char* op, const Tensor& logits) {
  check_float(op, "logits", logits);
  SBP_CHECK(logits.cols() > 0, arg(op, "logits", logits) + " must be (n, V) with V > 0");
}

void check_adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamWStep& s) {
  const char* op = "adamw_step";
  check_float(op, "param", param);
  check_same_numel(op, "grad", grad, "param", param);
  check_dtype(op, "m", m, DType::F32);
  check_dtype(op, "v", v, DType::F32);
  SBP_CHECK(m.numel() == param.numel() && v.numel() == param.numel(),
            arg(op, "m", m) + " and v " + v.describe() + " must have the numel of param " +
                param.describe());
  SBP_CHECK(std::isfinite(s.lr) && s.lr >= 0.0f,
            std::string(op) + ": lr = " + num(s.lr) + " must be finite and >= 0");
  SBP_CHECK(
      s.beta1 >= 0.0f && s.beta1 < 1.0f && s.beta2 >= 0.0f && s.beta2 < 1.0f,
      std::string(op) + ": betas (" + num(s.beta1) + ", " + num(s.beta2) + ") must be in [0, 1)");
  SBP_CHECK(std::isfinite(s.eps) && s.eps > 0.0f,
            std::string(op) + ": eps = " + num(s.eps) + " must be finite and > 0");
  SBP_CHECK(
      std::isfinite(s.weight_decay) && s.weight_decay >= 0.0f,
      std::string(op) + ": weight_decay = " + num(s.weight_decay) + " must be finite and >= 0");
  SBP_CHECK(s.step >= 1, std::string(op) + ": step = " + num(s.step) + " must be >= 1 (1-based)");
}

}  // namespace

void contract::check_adamw_args(const Tensor& param, const Tensor& grad, const Tensor& m,
                                const Tensor& v, const AdamWStep& s) {
  check_adamw(param, grad, m, v, s);
}

void Backend::owns(const char* op, std::initializer_list<const Tensor*> tensors) const {
  for (const Tensor* t : tensors) {
    SBP_CHECK(t->memory == this, std::string(op) + ": tensor " + t->describe() +
                                     " lives in another memory space than this " + name() +
                                     " backend's (move data with upload/download)");
    if (!in_flight_.empty()) {
      if (const char* busy = in_flight(t->data, t->nbytes()))
        SBP_CHECK(false, std::string(op) + ": tensor " + t->describe() + " " + busy);
    }
  }
}

// ---- host offload ----

namespace {

// Whether two byte ranges overlap; a range without bytes overlaps nothing.
bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  if (a == nullptr || b == nullptr || na == 0 || nb == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + nb && pb < pa + na;
}

void check_copy(const char* op, const Tensor& dst, const Tensor& src) {
  SBP_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
            arg(op, "dst", dst) + " must have the dtype and numel of src " + src.describe());
}

}  // namespace

const char* Backend::in_flight(const void* p, size_t bytes) const {
  for (const InFlight& f : in_flight_) {
    if (overlaps(p, bytes, f.device.data, f.device.nbytes()) ||
        overlaps(p, bytes, f.host.data, f.host.nbytes()))
      return "is in flight: an asynchronous copy not yet waited for (wait_copy) reads or writes it";
  }
  return nullptr;
}

void Backend::drain_copies() {
  if (!in_flight_.empty()) wait_copy(in_flight_.back().ticket);
}

Backend::CopyTicket Backend::queue_copy(const Tensor& device, const Tensor& host, bool to_host) {
  const char* op = to_host ? "offload_async" : "prefetch_async";
  owns(op, {&device});  // (also: not in flight already)
  SBP_CHECK(host.memory == &host_memory(),
            arg(op, to_host ? "dst" : "src", host) + " must live in the backend's host memory");
  SBP_CHECK(host.data != nullptr || !holds_data() || host.numel() == 0,
            arg(op, to_host ? "dst" : "src", host) + " has no bytes");
  if (const char* busy = in_flight(host.data, host.nbytes()))
    SBP_CHECK(false, arg(op, to_host ? "dst" : "src", host) + " " + busy);
  const CopyTicket ticket = next_ticket_++;
  const size_t bytes = device.nbytes();
  if (holds_data() && bytes > 0) {
    if (to_host)
      copy_async_impl(host.data, device.data, bytes, true, ticket);
    else
      copy_async_impl(device.data, host.data, bytes, false, ticket);
  }
  (to_host ? offloaded_bytes_ : prefetched_bytes_) += static_cast<int64_t>(bytes);
  in_flight_.push_back(InFlight{device, host, ticket});
  return ticket;
}

Backend::CopyTicket Backend::offload_async(const Tensor& dst, const Tensor& src) {
  check_copy("offload_async", dst, src);
  return queue_copy(src, dst, true);
}

Backend::CopyTicket Backend::prefetch_async(const Tensor& dst, const Tensor& src) {
  check_copy("prefetch_async", dst, src);
  return queue_copy(dst, src, false);
}

std::shared_ptr<std::vector<float>> Backend::download_at_next_wait(const Tensor& src) {
  check_dtype("download_at_next_wait", "src", src, DType::F32);
  owns("download_at_next_wait", {&src});
  auto dst = std::make_shared<std::vector<float>>(static_cast<size_t>(src.numel()));
  if (src.numel() == 0) return dst;
  const Access access(*this);
  download_at_next_wait_impl(src, dst);
  return dst;
}

void Backend::download_at_next_wait_impl(const Tensor& src,
                                         std::shared_ptr<std::vector<float>> dst) {
  download(dst->data(), src);
}

void Backend::wait_copy(CopyTicket ticket) {
  SBP_CHECK(ticket >= 1 && ticket < next_ticket_,
            "wait_copy: ticket " + num(ticket) + " was not issued by this backend");
  // Tickets already waited for have left the list; the copy queue is first in, first out.
  if (in_flight_.empty() || in_flight_.front().ticket > ticket) return;
  if (holds_data()) wait_copy_impl(ticket);
  std::erase_if(in_flight_, [&](const InFlight& f) { return f.ticket <= ticket; });
}

template <class Bytes, class Impl>
void Backend::run_op(OpFamily family, Bytes&& bytes, Impl&& impl) {
  if (profile_ == nullptr || in_op_) {
    impl();
    return;
  }
  struct InOp {  // cleared on the way out, an exception included
    bool& flag;
    explicit InOp(bool& f) : flag(f) { flag = true; }
    ~InOp() { flag = false; }
  } const in_op(in_op_);
  const int64_t flops0 = flops_;
  synchronize_impl();  // earlier ops' work is not this op's
  const auto t0 = std::chrono::steady_clock::now();
  impl();
  synchronize_impl();  // nor is this op's work done when an asynchronous launch returns
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  profile_->record(family, s, flops_ - flops0, bytes());
}

void Backend::run_extension(const char* op, OpFamily family, std::span<const Tensor* const> tensors,
                            int64_t bytes, const std::function<void()>& impl) {
  for (const Tensor* t : tensors) owns(op, {t});
  const Access access(*this);
  run_op(
      family, [&] { return bytes; }, impl);
}

void check_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& seg_start, int64_t q_offset,
                             const AttentionDims& dims) {
  check_attention("attention_forward", out, lse, q, k, v, seg_start, q_offset, dims);
}

void check_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& seg_start,
                              int64_t q_offset, const AttentionDims& dims) {
  const char* op = "attention_backward";
  check_attention(op, out, lse, q, k, v, seg_start, q_offset, dims);
  check_like(op, "dq", dq, "q", q);
  check_like(op, "dout", dout, "q", q);
  check_like(op, "dk", dk, "k", k);
  check_like(op, "dv", dv, "k", k);
}

// ---- dense ----

void Backend::gemm(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                   float alpha, float beta) {
  check_gemm(C, A, trans_a, B, trans_b, alpha, beta);
  owns("gemm", {&C, &A, &B});
  // Conversion scratch (gemm_scratch.h), held for this call only; every part of the rule is a
  // whole number of BF16 elements. Allocated before the memory opens: a space that keeps its
  // memory out of reach (the checking backend) opens every block it holds when the op starts,
  // and a pool that poisons new buffers writes them in an access scope of its own.
  const int64_t bytes =
      gemm_scratch(C.dtype, A.dtype, B.dtype, C.numel(), A.numel(), B.numel()).total();
  Buffer scratch;
  if (bytes > 0)
    scratch = (scratch_pool_ ? *scratch_pool_ : own_pool_)
                  .allocate(Category::layer_workspace, DType::BF16, {bytes / 2});
  const Access access(*this);
  const bool outer = profile_ != nullptr && !in_op_;  // a nested call is its caller's work
  run_op(
      OpFamily::layer_gemm, [&] { return nb(A) + nb(B) + nb(C) * (beta != 0.0f ? 2 : 1); },
      [&] { gemm_impl(C, A, trans_a, B, trans_b, alpha, beta, scratch.view()); });
  if (outer)  // the shape, for the time planner's per-shape rates (plan/time_model.h)
    profile_->record_gemm(GemmShape{.M = trans_a ? A.cols() : A.rows(),
                                    .N = trans_b ? B.rows() : B.cols(),
                                    .K = trans_a ? A.rows() : A.cols(),
                                    .a = A.dtype,
                                    .b = B.dtype,
                                    .c = C.dtype,
                                    .trans_a = trans_a,
                                    .trans_b = trans_b,
                                    .accumulate = beta != 0.0f});
}

// ---- elementwise and reductions ----

void Backend::fill(const Tensor& x, float value) {
  check_float("fill", "x", x);
  owns("fill", {&x});
  const Access access(*this);
  run_op(
      OpFamily::copy, [&] { return nb(x); }, [&] { fill_impl(x, value); });
}

void Backend::fill_normal(const Tensor& x, float mean, float std, uint64_t seed, uint64_t stream,
                          uint64_t offset) {
  check_float("fill_normal", "x", x);
  SBP_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0.0f,
            "fill_normal: mean " + std::to_string(mean) + " and std " + std::to_string(std) +
                " must be finite, std >= 0");
  owns("fill_normal", {&x});
  const Access access(*this);
  run_op(
      OpFamily::copy, [&] { return nb(x); },
      [&] { fill_normal_impl(x, mean, std, seed, stream, offset); });
}

void Backend::copy(const Tensor& dst, const Tensor& src) {
  const char* op = "copy";
  SBP_CHECK(dst.defined() && src.defined() && dst.numel() == src.numel(),
            arg(op, "src", src) + " -> dst " + dst.describe() + ": numel must be equal");
  SBP_CHECK(dst.dtype == src.dtype || (is_float(dst.dtype) && is_float(src.dtype)),
            arg(op, "src", src) + " -> dst " + dst.describe() +
                ": dtypes must be equal, or F32 and BF16");
  owns("copy", {&dst, &src});
  const Access access(*this);
  run_op(
      OpFamily::copy, [&] { return nb(dst) + nb(src); }, [&] { copy_impl(dst, src); });
}

void Backend::add_inplace(const Tensor& y, const Tensor& x) {
  check_float("add_inplace", "y", y);
  check_same_numel("add_inplace", "x", x, "y", y);
  owns("add_inplace", {&y, &x});
  const Access access(*this);
  run_op(
      OpFamily::elementwise, [&] { return 2 * nb(y) + nb(x); }, [&] { add_inplace_impl(y, x); });
}

void Backend::scale_inplace(const Tensor& x, float s) {
  check_float("scale_inplace", "x", x);
  owns("scale_inplace", {&x});
  const Access access(*this);
  run_op(
      OpFamily::elementwise, [&] { return 2 * nb(x); }, [&] { scale_inplace_impl(x, s); });
}

double Backend::sum_squares(const Tensor& x) {
  check_float("sum_squares", "x", x);
  owns("sum_squares", {&x});
  const Access access(*this);
  double r = 0.0;
  run_op(
      OpFamily::elementwise, [&] { return nb(x); }, [&] { r = sum_squares_impl(x); });
  return r;
}

double Backend::sum_squares(std::span<const Tensor> xs) {
  std::vector<double> each(xs.size());
  sum_squares_each(xs, each);
  double ss = 0.0;
  for (double v : each) ss += v;  // in order: the loop's bits
  return ss;
}

void Backend::sum_squares_each(std::span<const Tensor> xs, std::span<double> out) {
  for (const Tensor& x : xs) {
    check_float("sum_squares", "x", x);
    owns("sum_squares", {&x});
  }
  SBP_CHECK(out.size() == xs.size(), "sum_squares: out has " + std::to_string(out.size()) +
                                         " entries for " + std::to_string(xs.size()) + " tensors");
  const Access access(*this);
  run_op(
      OpFamily::elementwise,
      [&] {
        int64_t b = 0;
        for (const Tensor& x : xs) b += nb(x);
        return b;
      },
      [&] { sum_squares_each_impl(xs, out); });
}

void Backend::add_bias(const Tensor& y, const Tensor& b) {
  const char* op = "add_bias";
  check_float(op, "y", y);
  check_float(op, "b", b);
  SBP_CHECK(b.numel() == y.cols(),
            arg(op, "b", b) + " must have one entry per column of y " + y.describe());
  owns("add_bias", {&y, &b});
  const Access access(*this);
  run_op(
      OpFamily::elementwise, [&] { return 2 * nb(y) + nb(b); }, [&] { add_bias_impl(y, b); });
}

void Backend::bias_backward(const Tensor& db, const Tensor& dy) {
  const char* op = "bias_backward";
  check_float(op, "db", db);
  check_float(op, "dy", dy);
  SBP_CHECK(db.numel() == dy.cols(),
            arg(op, "db", db) + " must have one entry per column of dy " + dy.describe());
  owns("bias_backward", {&db, &dy});
  const Access access(*this);
  run_op(
      OpFamily::elementwise, [&] { return 2 * nb(db) + nb(dy); },
      [&] { bias_backward_impl(db, dy); });
}

// ---- RMSNorm ----

void Backend::rmsnorm_forward(const Tensor& y, const Tensor& x, const Tensor& g, float eps,
                              float weight_offset) {
  const char* op = "rmsnorm_forward";
  check_float(op, "x", x);
  check_float(op, "g", g);
  check_same_numel(op, "y", y, "x", x);
  check_rmsnorm(op, x, g, eps);
  SBP_CHECK(std::isfinite(weight_offset),
            std::string(op) + ": weight_offset = " + num(weight_offset) + " is not finite");
  owns("rmsnorm_forward", {&y, &x, &g});
  const Access access(*this);
  run_op(
      OpFamily::norm, [&] { return nb(y) + nb(x) + nb(g); },
      [&] { rmsnorm_forward_impl(y, x, g, eps, weight_offset); });
}

void Backend::rmsnorm_backward(const Tensor& dx, const Tensor& dg, const Tensor& dy,
                               const Tensor& x, const Tensor& g, float eps, float weight_offset) {
  const char* op = "rmsnorm_backward";
  SBP_CHECK(std::isfinite(weight_offset),
            std::string(op) + ": weight_offset = " + num(weight_offset) + " is not finite");
  check_float(op, "x", x);
  check_float(op, "g", g);
  check_same_numel(op, "dx", dx, "x", x);
  check_same_numel(op, "dy", dy, "x", x);
  check_same_numel(op, "dg", dg, "g", g);
  check_rmsnorm(op, x, g, eps);
  owns("rmsnorm_backward", {&dx, &dg, &dy, &x, &g});
  const Access access(*this);
  run_op(
      OpFamily::norm, [&] { return 2 * nb(dx) + 2 * nb(dg) + nb(dy) + nb(x) + nb(g); },
      [&] { rmsnorm_backward_impl(dx, dg, dy, x, g, eps, weight_offset); });
}

// ---- rotary embedding ----

void Backend::rope_table(const Tensor& table, std::span<const float> inv_freq,
                         float attention_factor, int64_t first_position) {
  const char* op = "rope_table";
  check_rope_table(op, table);
  const int64_t half = table.cols() / 2;
  SBP_CHECK(static_cast<int64_t>(inv_freq.size()) == half,
            arg(op, "table", table) + " needs h/2 = " + num(half) + " inverse frequencies, not " +
                num(static_cast<int64_t>(inv_freq.size())));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    SBP_CHECK(std::isfinite(inv_freq[i]), std::string(op) + ": inv_freq[" +
                                              num(static_cast<int64_t>(i)) +
                                              "] = " + num(inv_freq[i]) + " is not finite");
  SBP_CHECK(std::isfinite(attention_factor) && attention_factor > 0,
            std::string(op) + ": attention_factor = " + num(attention_factor) +
                " must be finite and > 0");
  SBP_CHECK(first_position >= 0 && first_position <= INT32_MAX - table.rows(),
            std::string(op) + ": first_position " + num(first_position) + " with " +
                num(table.rows()) + " rows leaves the int32 positions");
  owns("rope_table", {&table});
  const Access access(*this);
  run_op(
      OpFamily::rope, [&] { return nb(table); },
      [&] { rope_table_impl(table, inv_freq, attention_factor, first_position); });
}

void Backend::rope_forward(const Tensor& x, const Tensor& positions, const Tensor& table) {
  check_rope("rope_forward", x, positions, table);
  owns("rope_forward", {&x, &positions, &table});
  const Access access(*this);
  run_op(
      OpFamily::rope, [&] { return 2 * nb(x) + nb(positions) + rope_rows(x, table); },
      [&] { rope_forward_impl(x, positions, table); });
}

void Backend::rope_backward(const Tensor& dx, const Tensor& positions, const Tensor& table) {
  check_rope("rope_backward", dx, positions, table);
  owns("rope_backward", {&dx, &positions, &table});
  const Access access(*this);
  run_op(
      OpFamily::rope, [&] { return 2 * nb(dx) + nb(positions) + rope_rows(dx, table); },
      [&] { rope_backward_impl(dx, positions, table); });
}

// ---- SwiGLU ----

void Backend::swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  check_float(op, "gate", gate);
  check_same_numel(op, "up", up, "gate", gate);
  check_same_numel(op, "out", out, "gate", gate);
  owns("swiglu_forward", {&out, &gate, &up});
  const Access access(*this);
  run_op(
      OpFamily::glu, [&] { return nb(out) + nb(gate) + nb(up); },
      [&] { swiglu_forward_impl(out, gate, up); });
}

void Backend::swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                              const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_backward";
  check_float(op, "gate", gate);
  check_same_numel(op, "up", up, "gate", gate);
  check_same_numel(op, "dout", dout, "gate", gate);
  check_same_numel(op, "dgate", dgate, "gate", gate);
  check_same_numel(op, "dup", dup, "gate", gate);
  owns("swiglu_backward", {&dgate, &dup, &dout, &gate, &up});
  const Access access(*this);
  run_op(
      OpFamily::glu, [&] { return 2 * nb(dgate) + 2 * nb(dup) + nb(dout) + nb(gate) + nb(up); },
      [&] { swiglu_backward_impl(dgate, dup, dout, gate, up); });
}

// ---- GeGLU ----

void Backend::geglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  const char* op = "geglu_forward";
  check_float(op, "gate", gate);
  check_same_numel(op, "up", up, "gate", gate);
  check_same_numel(op, "out", out, "gate", gate);
  owns(op, {&out, &gate, &up});
  const Access access(*this);
  run_op(
      OpFamily::glu, [&] { return nb(out) + nb(gate) + nb(up); },
      [&] { geglu_forward_impl(out, gate, up); });
}

void Backend::geglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                             const Tensor& gate, const Tensor& up) {
  const char* op = "geglu_backward";
  check_float(op, "gate", gate);
  check_same_numel(op, "up", up, "gate", gate);
  check_same_numel(op, "dout", dout, "gate", gate);
  check_same_numel(op, "dgate", dgate, "gate", gate);
  check_same_numel(op, "dup", dup, "gate", gate);
  owns(op, {&dgate, &dup, &dout, &gate, &up});
  const Access access(*this);
  run_op(
      OpFamily::glu, [&] { return 2 * nb(dgate) + 2 * nb(dup) + nb(dout) + nb(gate) + nb(up); },
      [&] { geglu_backward_impl(dgate, dup, dout, gate, up); });
}

// ---- logit soft-capping ----

namespace {
void check_softcap(const char* op, float cap) {
  SBP_CHECK(std::isfinite(cap) && cap > 0.0f,
            std::string(op) + ": cap = " + num(cap) + " must be finite and > 0");
}
}  // namespace

void Backend::softcap_forward(const Tensor& x, float cap) {
  const char* op = "softcap_forward";
  check_float(op, "x", x);
  check_softcap(op, cap);
  owns(op, {&x});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return 2 * nb(x); }, [&] { softcap_forward_impl(x, cap); });
}

void Backend::softcap_backward(const Tensor& dx, const Tensor& y, float cap) {
  const char* op = "softcap_backward";
  check_float(op, "y", y);
  check_same_numel(op, "dx", dx, "y", y);
  check_softcap(op, cap);
  owns(op, {&dx, &y});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return 2 * nb(dx) + nb(y); },
      [&] { softcap_backward_impl(dx, y, cap); });
}

// ---- attention ----

void Backend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q,
                                const Tensor& k, const Tensor& v, const Tensor& seg_start,
                                int64_t q_offset, const AttentionDims& dims) {
  check_attention_forward(out, lse, q, k, v, seg_start, q_offset, dims);
  owns("attention_forward", {&out, &lse, &q, &k, &v, &seg_start});
  const Access access(*this);
  run_op(
      OpFamily::attention_forward, [&] { return nb(out) + nb(lse) + nb(q) + nb(k) + nb(v); },
      [&] { attention_forward_impl(out, lse, q, k, v, seg_start, q_offset, dims); });
}

void Backend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& seg_start, int64_t q_offset,
                                 const AttentionDims& dims) {
  check_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, seg_start, q_offset, dims);
  owns("attention_backward", {&dq, &dk, &dv, &dout, &q, &k, &v, &out, &lse, &seg_start});
  const Access access(*this);
  run_op(
      OpFamily::attention_backward,
      [&] {
        return 2 * (nb(dq) + nb(dk) + nb(dv)) + nb(dout) + nb(q) + nb(k) + nb(v) + nb(out) +
               nb(lse);
      },
      [&] {
        attention_backward_impl(dq, dk, dv, dout, q, k, v, out, lse, seg_start, q_offset, dims);
      });
}

// ---- embedding ----

void Backend::embedding_forward(const Tensor& x, const Tensor& ids, const Tensor& table) {
  const char* op = "embedding_forward";
  check_float(op, "x", x);
  check_float(op, "table", table);
  SBP_CHECK(table.cols() == x.cols(),
            arg(op, "table", table) + " must be (V, d) for x " + x.describe() + " (n, d)");
  check_rows_vector(op, "ids", ids, DType::I32, x.rows());
  owns("embedding_forward", {&x, &ids, &table});
  const Access access(*this);
  run_op(
      OpFamily::embedding, [&] { return 2 * nb(x) + nb(ids); },
      [&] { embedding_forward_impl(x, ids, table); });
}

void Backend::embedding_backward(const Tensor& dtable, const Tensor& dx, const Tensor& ids,
                                 int64_t padding_row) {
  const char* op = "embedding_backward";
  check_float(op, "dx", dx);
  check_float(op, "dtable", dtable);
  SBP_CHECK(dtable.cols() == dx.cols(),
            arg(op, "dtable", dtable) + " must be (V, d) for dx " + dx.describe() + " (n, d)");
  check_rows_vector(op, "ids", ids, DType::I32, dx.rows());
  SBP_CHECK(padding_row >= -1 && padding_row < dtable.rows(),
            std::string(op) + ": padding_row " + std::to_string(padding_row) + " outside [-1, " +
                std::to_string(dtable.rows()) + ")");
  owns("embedding_backward", {&dtable, &dx, &ids});
  const Access access(*this);
  run_op(
      OpFamily::embedding, [&] { return 3 * nb(dx) + nb(ids); },
      [&] { embedding_backward_impl(dtable, dx, ids, padding_row); });
}

// ---- LM head ----

void Backend::logsoftmax_target(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                                const Tensor& targets) {
  const char* op = "logsoftmax_target";
  check_logits(op, logits);
  const int64_t n = logits.rows();
  check_rows_vector(op, "lse", lse, DType::F32, n);
  check_rows_vector(op, "logp", logp, DType::F32, n);
  check_rows_vector(op, "targets", targets, DType::I32, n);
  owns("logsoftmax_target", {&lse, &logp, &logits, &targets});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return nb(logits) + nb(lse) + nb(logp) + nb(targets); },
      [&] { logsoftmax_target_impl(lse, logp, logits, targets); });
}

void Backend::dlogits_inplace(const Tensor& logits, const Tensor& lse, const Tensor& targets,
                              const Tensor& dlogp) {
  const char* op = "dlogits_inplace";
  check_logits(op, logits);
  const int64_t n = logits.rows();
  check_rows_vector(op, "lse", lse, DType::F32, n);
  check_rows_vector(op, "targets", targets, DType::I32, n);
  check_rows_vector(op, "dlogp", dlogp, DType::F32, n);
  owns("dlogits_inplace", {&logits, &lse, &targets, &dlogp});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return 2 * nb(logits) + nb(lse) + nb(targets) + nb(dlogp); },
      [&] { dlogits_inplace_impl(logits, lse, targets, dlogp); });
}

void Backend::argmax_rows(const Tensor& out, const Tensor& logits) {
  const char* op = "argmax_rows";
  check_logits(op, logits);
  check_rows_vector(op, "out", out, DType::I32, logits.rows());
  owns("argmax_rows", {&out, &logits});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return nb(logits) + nb(out); },
      [&] { argmax_rows_impl(out, logits); });
}

void Backend::softmax_entropy(const Tensor& entropy, const Tensor& logits, const Tensor& lse) {
  const char* op = "softmax_entropy";
  check_logits(op, logits);
  const int64_t n = logits.rows();
  check_rows_vector(op, "entropy", entropy, DType::F32, n);
  check_rows_vector(op, "lse", lse, DType::F32, n);
  owns("softmax_entropy", {&entropy, &logits, &lse});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return nb(logits) + nb(lse) + nb(entropy); },
      [&] { softmax_entropy_impl(entropy, logits, lse); });
}

void Backend::dlogits_entropy_inplace(const Tensor& logits, const Tensor& lse,
                                      const Tensor& targets, const Tensor& dlogp,
                                      const Tensor& entropy, const Tensor& dentropy) {
  const char* op = "dlogits_entropy_inplace";
  check_logits(op, logits);
  const int64_t n = logits.rows();
  check_rows_vector(op, "lse", lse, DType::F32, n);
  check_rows_vector(op, "targets", targets, DType::I32, n);
  check_rows_vector(op, "dlogp", dlogp, DType::F32, n);
  check_rows_vector(op, "entropy", entropy, DType::F32, n);
  check_rows_vector(op, "dentropy", dentropy, DType::F32, n);
  owns("dlogits_entropy_inplace", {&logits, &lse, &targets, &dlogp, &entropy, &dentropy});
  const Access access(*this);
  run_op(
      OpFamily::head_softmax, [&] { return 2 * nb(logits) + 6 * nb(lse); },
      [&] { dlogits_entropy_inplace_impl(logits, lse, targets, dlogp, entropy, dentropy); });
}

// ---- optimizer ----

void Backend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                         const AdamWStep& s) {
  check_adamw(param, grad, m, v, s);
  owns("adamw_step", {&param, &grad, &m, &v});
  const Access access(*this);
  run_op(
      OpFamily::optimizer, [&] { return 2 * nb(param) + nb(grad) + 2 * nb(m) + 2 * nb(v); },
      [&] { adamw_step_impl(param, grad, m, v, s); });
}

}  // namespace sbp
