// gemm_bench: GFLOP/s of the CPU backend's GEMM with the BF16 operands of a mixed-precision
// step, against fp32 sgemm on the same shapes, on the shapes of a real model (default
// qwen3-0.6b: d = 1024, H*h = 2048, G*h = 1024, F = 3072, V = 151936).
//
//   gemm_bench [--rows 256,1024,4096] [--head-rows 512] [--reps 5] [--threads N]
//              [--clock wall|cpu] [--only layer|head] [--match TEXT] [--json FILE]
//              [--d 1024] [--qdim 2048] [--kvdim 1024] [--F 3072] [--V 151936]
//
// Columns, each the median of --reps timed runs after one warm-up (the variants of a case take
// turns, run by run):
//   fp32    Backend::gemm with every operand F32 (one cblas_sgemm call);
//   mixed   Backend::gemm with the dtypes of the bf16 step (BF16 panels widened to fp32 in
//           bounded scratch, then cblas_sgemm: gemm_bf16.cpp);
//   sbgemm  OpenBLAS cblas_sbgemm (bf16 A and B, fp32 C), where A and B are both BF16 and the
//           OpenBLAS in use exports it (looked up at run time: Debian 12's 0.3.21 declares it
//           in cblas.h but is built without it); a BF16 C goes through an fp32 copy, timed too.
// --clock cpu: process CPU time / threads instead of wall time (see attention_bench).
// --match TEXT: only the cases whose name contains TEXT.
#include <dlfcn.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/blas.h"
#include "backend/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/rng.h"

#include "bench_clock.h"

namespace {

using sbp::DType;
using sbp::Shape;
using sbp::Tensor;

using sbp::bench::Clock;

// Median seconds of each of fns over reps rounds, after one warm-up run of each. The variants
// take turns within a round, so that a change of load on a shared machine hits them alike.
template <class... F>
std::vector<double> median_times(const Clock& clock, int reps, F&&... fns) {
  (fns(), ...);
  std::vector<std::vector<double>> t(sizeof...(fns));
  for (int r = 0; r < reps; ++r) {
    size_t i = 0;
    auto time = [&](auto& fn) {
      const double t0 = clock.now();
      fn();
      t[i++].push_back(clock.now() - t0);
    };
    (time(fns), ...);
  }
  std::vector<double> med;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

// A matrix with F32 and BF16 copies of the same (bf16-representable) values.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  Matrix(int64_t r, int64_t c, sbp::Rng& rng) : rows(r), cols(c) {
    f32.resize(static_cast<size_t>(r * c));
    b16.resize(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      b16[i] = sbp::f32_to_bf16(0.5f * rng.normal());
      f32[i] = sbp::bf16_to_f32(b16[i]);
    }
  }
  // The CPU backend's memory is host memory: the vectors stand in for its allocations.
  Tensor view(DType dt, sbp::MemorySpace* space) {
    void* p = dt == DType::BF16 ? static_cast<void*>(b16.data()) : static_cast<void*>(f32.data());
    return Tensor(p, dt, Shape{rows, cols}, space);
  }
};

using SbgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float,
                          const uint16_t*, int, const uint16_t*, int, float, float*, int);

SbgemmFn find_sbgemm() { return reinterpret_cast<SbgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }

// One GEMM of a step: C (M, N) = op(A) op(B) (+ C when accumulate), with the step's dtypes.
struct Case {
  std::string name;
  int64_t M, N, K;
  bool ta, tb, accumulate;
  DType c, a, b;
};

const char* dt(DType d) { return d == DType::BF16 ? "bf16" : "f32"; }

struct Row {
  Case c;
  double fp32 = 0, mixed = 0, sbgemm = -1;  // GFLOP/s; sbgemm < 0: not measured
};

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return def;
}
std::string sarg(int argc, char** argv, const char* name, const char* def = "") {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}
std::vector<int64_t> list_arg(int argc, char** argv, const char* name, const char* def) {
  std::vector<int64_t> out;
  std::string s = sarg(argc, argv, name, def);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::atoll(s.substr(pos, comma - pos).c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(arg(argc, argv, "--threads", 0));
  sbp::set_cpu_threads(threads);
  Clock clock;
  clock.cpu = sarg(argc, argv, "--clock", "wall") == "cpu";
  clock.threads = sbp::cpu_threads();
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 5));
  const std::string only = sarg(argc, argv, "--only");
  const int64_t d = arg(argc, argv, "--d", 1024), qd = arg(argc, argv, "--qdim", 2048);
  const int64_t kvd = arg(argc, argv, "--kvdim", 1024), F = arg(argc, argv, "--F", 3072);
  const int64_t V = arg(argc, argv, "--V", 151936), hr = arg(argc, argv, "--head-rows", 512);
  const DType B16 = DType::BF16, F32 = DType::F32;

  std::vector<Case> cases;
  if (only != "head") {
    for (int64_t R : list_arg(argc, argv, "--rows", "256,1024,4096")) {
      const std::string r = " R=" + std::to_string(R);
      // forward, x W^T: bf16 activations out of bf16 activations and weights
      cases.push_back({"x Wq^T" + r, R, qd, d, false, true, false, B16, B16, B16});
      cases.push_back({"x Wk^T" + r, R, kvd, d, false, true, false, B16, B16, B16});
      cases.push_back({"x Wg^T" + r, R, F, d, false, true, false, B16, B16, B16});
      cases.push_back({"o Wo^T" + r, R, d, qd, false, true, false, B16, B16, B16});
      cases.push_back({"h Wd^T" + r, R, d, F, false, true, false, B16, B16, B16});
      // backward, dy W: fp32 gradient times bf16 weight into an fp32 gradient
      cases.push_back({"dq Wq" + r, R, d, qd, false, false, false, F32, F32, B16});
      cases.push_back({"dg Wg" + r, R, d, F, false, false, false, F32, F32, B16});
      cases.push_back({"dh Wd" + r, R, F, d, false, false, false, F32, F32, B16});
      // weight gradients, dW += dy^T x (K = rows): fp32 gradient, bf16 activations
      cases.push_back({"dWq+=dq^T x" + r, qd, d, R, true, false, true, F32, F32, B16});
      cases.push_back({"dWg+=dg^T x" + r, F, d, R, true, false, true, F32, F32, B16});
      cases.push_back({"dWd+=dy^T h" + r, d, F, R, true, false, true, F32, F32, B16});
      cases.push_back({"dWq+=dq^T x bf16" + r, qd, d, R, true, false, true, B16, F32, B16});
    }
  }
  if (only != "layer") {
    const std::string r = " R=" + std::to_string(hr);
    // LM head block: logits (bf16) = hf Wlm^T; dhf = dlogits Wlm (dlogits written over the
    // bf16 logits); dWlm += dlogits^T hf.
    cases.push_back({"logits=hf Wlm^T" + r, hr, V, d, false, true, false, B16, B16, B16});
    cases.push_back({"dhf=dlogits Wlm" + r, hr, d, V, false, false, false, F32, B16, B16});
    cases.push_back({"dWlm+=dlogits^T hf" + r, V, d, hr, true, false, true, F32, B16, B16});
  }

  const std::string match = sarg(argc, argv, "--match");
  std::erase_if(cases, [&](const Case& c) { return c.name.find(match) == std::string::npos; });

  const SbgemmFn sbgemm = find_sbgemm();
  std::printf("gemm_bench: %d threads, %s clock, median of %d; cblas_sbgemm %s\n",
              sbp::cpu_threads(), clock.cpu ? "cpu" : "wall", reps,
              sbgemm ? "found" : "not exported by this OpenBLAS (n/a)");
  std::printf(
      "| case | M | N | K | C = A B dtypes | fp32 GFLOP/s | mixed GFLOP/s | mixed/fp32 |"
      " sbgemm GFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n");
  sbp::CpuBackend be;
  sbp::Rng rng(11, "gemm_bench");
  std::vector<Row> rows;
  for (const Case& c : cases) {
    Matrix A(c.ta ? c.K : c.M, c.ta ? c.M : c.K, rng);
    Matrix B(c.tb ? c.N : c.K, c.tb ? c.K : c.N, rng);
    Matrix C(c.M, c.N, rng);
    const float beta = c.accumulate ? 1.0f : 0.0f;
    const double flop = 2.0 * static_cast<double>(c.M) * c.N * c.K;
    Row row{c};
    auto fp32 = [&] {
      be.gemm(C.view(F32, &be), A.view(F32, &be), c.ta, B.view(F32, &be), c.tb, 1.0f, beta);
    };
    auto mixed = [&] {
      be.gemm(C.view(c.c, &be), A.view(c.a, &be), c.ta, B.view(c.b, &be), c.tb, 1.0f, beta);
    };
    if (sbgemm && c.a == B16 && c.b == B16) {
      std::vector<float> cf(c.c == B16 ? static_cast<size_t>(c.M * c.N) : 0);
      auto sb = [&] {
        float* out = C.f32.data();
        if (c.c == B16) {  // bf16 C: through an fp32 copy, rounded back
          for (size_t i = 0; i < cf.size(); ++i) cf[i] = sbp::bf16_to_f32(C.b16[i]);
          out = cf.data();
        }
        sbgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans,
               static_cast<int>(c.M), static_cast<int>(c.N), static_cast<int>(c.K), 1.0f,
               A.b16.data(), static_cast<int>(A.cols), B.b16.data(), static_cast<int>(B.cols), beta,
               out, static_cast<int>(c.N));
        if (c.c == B16)
          for (size_t i = 0; i < cf.size(); ++i) C.b16[i] = sbp::f32_to_bf16(cf[i]);
      };
      const std::vector<double> t = median_times(clock, reps, fp32, mixed, sb);
      row.sbgemm = flop / t[2] * 1e-9;
      row.fp32 = flop / t[0] * 1e-9;
      row.mixed = flop / t[1] * 1e-9;
    } else {
      const std::vector<double> t = median_times(clock, reps, fp32, mixed);
      row.fp32 = flop / t[0] * 1e-9;
      row.mixed = flop / t[1] * 1e-9;
    }
    char sb[32] = "n/a";
    if (row.sbgemm >= 0) std::snprintf(sb, sizeof sb, "%.1f", row.sbgemm);
    std::printf("| %s | %lld | %lld | %lld | %s = %s%s %s%s | %.1f | %.1f | %.2f | %s |\n",
                c.name.c_str(), static_cast<long long>(c.M), static_cast<long long>(c.N),
                static_cast<long long>(c.K), dt(c.c), dt(c.a), c.ta ? "^T" : "", dt(c.b),
                c.tb ? "^T" : "", row.fp32, row.mixed, row.mixed / row.fp32, sb);
    std::fflush(stdout);
    rows.push_back(row);
  }

  const std::string json = sarg(argc, argv, "--json");
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"threads\": " << sbp::cpu_threads() << ", \"reps\": " << reps << ", \"clock\": \""
      << (clock.cpu ? "cpu" : "wall") << "\", \"sbgemm_available\": " << (sbgemm ? "true" : "false")
      << ", \"cases\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << "  {\"name\": \"" << r.c.name << "\", \"M\": " << r.c.M << ", \"N\": " << r.c.N
        << ", \"K\": " << r.c.K << ", \"dtypes\": \"" << dt(r.c.c) << "=" << dt(r.c.a)
        << (r.c.ta ? "^T" : "") << "*" << dt(r.c.b) << (r.c.tb ? "^T" : "")
        << "\", \"fp32_gflops\": " << r.fp32 << ", \"mixed_gflops\": " << r.mixed
        << ", \"sbgemm_gflops\": " << (r.sbgemm >= 0 ? std::to_string(r.sbgemm) : "null") << "}"
        << (i + 1 < rows.size() ? ",\n" : "\n");
    }
    f << "]}\n";
  }
  return 0;
}
