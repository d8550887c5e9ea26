#pragma once
// The op test suite every backend runs (ops_*_test.cpp, misuse_test.cpp): a gtest fixture
// parameterised over the backends of all_backends(), and the two helpers through which the
// suite touches tensor data, upload() and download().
//
// A new backend gets the whole suite by adding one line to all_backends().
//
// Backends that do not compute (the shape-only planner) run every test body too: every valid
// call of the suite must be accepted by them exactly as by the CPU. Only the comparison of
// numbers is skipped for them (`if (!computes()) return;` before the first download).
//
// BF16: every op is also run with BF16 operands, in every combination of F32 and BF16 float
// tensors the contract allows (dtype_combo). Their inputs are bf16-representable values
// (randb), held exactly by an F32 tensor as by a BF16 one, so one float64 reference, evaluated
// on the rounded inputs, serves every combination. Tolerances: an F32 output is computed in
// fp32 from exact inputs, so it keeps the op's fp32 tolerance; a BF16 output is that fp32 value
// rounded once to nearest even, within 2^-8 of it relative (expect_close).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/meta/meta_backend.h"
#if defined(STREAMBP_HAVE_CUDA)
#include "backend/cuda_factory.h"
#endif
#include "core/dtype.h"
#include "core/pool.h"
#include "core/rng.h"
#include "support/test_support.h"

namespace sbp::test {

using Vec = std::vector<double>;

struct BackendCase {
  std::string name;  // the suffix of the test names: All/BackendOps.Gemm/cpu
  std::function<std::unique_ptr<Backend>()> make;
  // Empty when the backend can run on this machine; else why not: its tests are then skipped,
  // visibly (gtest and ctest report them as skipped), never left out.
  std::function<std::string()> unavailable = [] { return std::string(); };
};

// Why the CUDA backend cannot run here ("" when it can): no CUDA build, or no GPU/driver.
inline std::string cuda_unavailable() {
#if defined(STREAMBP_HAVE_CUDA)
  std::string why;
  if (cuda_device_count(&why) > 0) return "";
  return "no CUDA device (" + why + "): the GPU checks did not run";
#else
  return "this build has no CUDA backend (configure with -DSTREAMBP_CUDA=ON)";
#endif
}

// Every backend the suite runs on.
inline std::vector<BackendCase> all_backends() {
  return {
      {"cpu", [] { return make_backend(BackendSpec{BackendKind::cpu}); }},
      // The CPU backend with its memory out of reach outside its own operations: the suite's
      // only access to data is upload()/download(), as for a GPU.
      {"cpu_checked", [] { return make_backend(BackendSpec{BackendKind::cpu_checked}); }},
      {"meta", []() -> std::unique_ptr<Backend> { return std::make_unique<MetaBackend>(); }},
      // The whole suite on GPU 0 against the same float64 references (label `gpu` in ctest:
      // `ctest -L gpu`); skipped where there is no GPU.
      {"cuda", [] { return make_backend(BackendSpec{BackendKind::cuda, 0}); }, cuda_unavailable},
  };
}

// gtest prints a parameter with this (ctest names would show its bytes otherwise).
inline void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

struct BackendCaseName {
  std::string operator()(const ::testing::TestParamInfo<BackendCase>& info) const {
    return info.param.name;
  }
};

// ---- the two ways in and out of a backend's memory ----
// The backend's own transfers (core/memory.h): the suite never touches a tensor's bytes.

// A tensor of `shape` and `dtype` holding `host` (converted: F32, BF16 rounded to nearest even,
// I32 from whole numbers).
inline Buffer upload(Backend& be, Pool& pool, const Vec& host, Shape shape,
                     DType dtype = DType::F32) {
  Buffer b = pool.allocate(Category::other, dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(host.size()), shape.numel()) << "upload " << shape.str();
  if (!be.computes() || static_cast<int64_t>(host.size()) != shape.numel()) return b;
  if (dtype == DType::I32) {
    upload_i32(b.view(), std::vector<int32_t>(host.begin(), host.end()));
  } else {
    upload_f32(b.view(), std::vector<float>(host.begin(), host.end()));
  }
  return b;
}

// The values of t, as doubles. Only for backends that compute.
inline Vec download(Backend& be, const Tensor& t) {
  if (!be.computes()) {
    ADD_FAILURE() << "download from the " << be.name() << " backend, which has no data";
    return Vec(static_cast<size_t>(t.numel()), NAN);
  }
  if (t.dtype == DType::I32) {
    const std::vector<int32_t> v = download_i32(t);
    return Vec(v.begin(), v.end());
  }
  const std::vector<float> v = download_f32(t);
  return Vec(v.begin(), v.end());
}

// ---- the fixture ----

// ---- BF16 ----

// Unit roundoff of bf16 (8 significant bits): one rounding to nearest even moves a value by at
// most 2^-8 = 3.9e-3 of itself.
constexpr double kBf16Rel = 1.0 / 256.0;

// x rounded to the nearest bf16 (ties to even), as a BF16 tensor would hold it.
inline double round_bf16(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }
inline Vec round_bf16(Vec v) {
  for (double& x : v) x = round_bf16(x);
  return v;
}

// The dtype of float tensor i of a call in combination `combo` (bit i set: BF16), for loops
// over all 2^k combinations of k float tensors.
inline DType dtype_combo(int combo, int i) { return (combo >> i) & 1 ? DType::BF16 : DType::F32; }
// "F32 BF16 ..." for SCOPED_TRACE.
inline std::string combo_name(int combo, int k) {
  std::string s;
  for (int i = 0; i < k; ++i) s += std::string(i ? " " : "") + dtype_name(dtype_combo(combo, i));
  return s;
}

// Checks an op's output `got`, held in `dtype`, against its float64 reference `ref`:
//  - F32: rel_err_vec(got, ref) < fp32_tol (the op's fp32 tolerance);
//  - BF16: per element, |got - ref| <= 2^-8 |ref| + fp32_tol * max|ref|: the fp32 result (within
//    fp32_tol) rounded once to nearest even (within 2^-8 of itself).
inline void expect_close(const Vec& got, const Vec& ref, DType dtype, double fp32_tol,
                         const char* what = "") {
  ASSERT_EQ(got.size(), ref.size()) << what;
  if (dtype != DType::BF16) {
    const std::vector<float> a(got.begin(), got.end()), b(ref.begin(), ref.end());
    EXPECT_LT(rel_err(a.data(), b.data(), static_cast<int64_t>(a.size())), fp32_tol) << what;
    return;
  }
  double scale = 0;
  for (double x : ref) scale = std::max(scale, std::fabs(x));
  size_t worst = 0;
  double worst_ratio = 0;  // error / allowance
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = kBf16Rel * std::fabs(ref[i]) + fp32_tol * scale;
    const double err = std::fabs(got[i] - ref[i]);
    const double ratio = err == 0 ? 0 : (allowed > 0 ? err / allowed : INFINITY);
    if (!(ratio <= worst_ratio)) {  // NaN counts as the worst
      worst_ratio = std::isnan(ratio) ? INFINITY : ratio;
      worst = i;
    }
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << worst << " is " << got[worst]
                              << ", reference " << ref[worst];
}

class BackendOps : public ::testing::TestWithParam<BackendCase> {
 protected:
  // A backend that cannot run here is replaced by the shape-only one, so that the members
  // below can be built; SetUp then skips the test before its body runs.
  const std::string skip_reason = GetParam().unavailable();
  std::unique_ptr<Backend> backend = skip_reason.empty()
                                         ? GetParam().make()
                                         : std::unique_ptr<Backend>(std::make_unique<MetaBackend>());
  Backend& be = *backend;
  Ledger ledger;
  Pool pool{ledger, be};
  Rng rng{1234};

  void SetUp() override {
    if (!skip_reason.empty()) GTEST_SKIP() << GetParam().name << ": " << skip_reason;
  }

  bool computes() const { return be.computes(); }

  // n values scale * N(0, 1), rounded to fp32 (what the kernels see).
  Vec randn(int64_t n, float scale = 1.0f) {
    Vec v(static_cast<size_t>(n));
    for (double& x : v) x = static_cast<double>(scale * rng.normal());
    return v;
  }
  Buffer up(const Vec& host, Shape s, DType dt = DType::F32) {
    return upload(be, pool, host, s, dt);
  }
  // Random F32 tensor; `*host` receives its values.
  Buffer rand(Shape s, float scale = 1.0f, Vec* host = nullptr) {
    Vec v = randn(s.numel(), scale);
    if (host) *host = v;
    return up(v, s);
  }
  // n values scale * N(0, 1) rounded to bf16: held exactly by F32 and BF16 tensors alike.
  Vec randb(int64_t n, float scale = 1.0f) { return round_bf16(randn(n, scale)); }
  Buffer zeros(Shape s, DType dt = DType::F32) {
    return up(Vec(static_cast<size_t>(s.numel()), 0.0), s, dt);
  }
  Buffer ids(const std::vector<int32_t>& v) {
    return up(Vec(v.begin(), v.end()), {static_cast<int64_t>(v.size())}, DType::I32);
  }
  Vec down(const Tensor& t) { return download(be, t); }
  Vec down(const Buffer& b) { return download(be, b.view()); }
};

// ---- float64 helpers ----

// Central differences of f at x, returning the gradient.
inline Vec numeric_grad(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// test::rel_err (max |a - b| / max |b|) of fp32 copies: `got` holds a kernel's fp32 output,
// `ref` a float64 reference.
inline double rel_err_vec(const Vec& got, const Vec& ref) {
  EXPECT_EQ(got.size(), ref.size());
  const std::vector<float> a(got.begin(), got.end()), b(ref.begin(), ref.end());
  return rel_err(a.data(), b.data(), static_cast<int64_t>(std::min(a.size(), b.size())));
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

inline Vec plus(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

}  // namespace sbp::test
