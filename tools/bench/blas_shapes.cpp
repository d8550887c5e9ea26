// blas_shapes: seconds of cblas_sgemm on the GEMMs of a training step, for comparing BLAS
// providers (tools/bench/compare_blas.sh builds this one file against each and runs them in
// turns). Only the BLAS is linked, so the program is the same source for OpenBLAS, BLIS and MKL
// (-DSTREAMBP_BLAS_MKL: MKL's header); the thread count comes from the environment
// (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS, MKL_NUM_THREADS).
//
//   blas_shapes [--name openblas] [--rows 256,512,1024,2048,4096] [--head-rows 512] [--reps 3]
//               [--d 1024] [--qdim 2048] [--kvdim 1024] [--F 3072] [--V 151936]
//
// Shapes (default qwen3-0.6b), fp32 row-major as the CPU backend calls sgemm, at every layer
// chunk size R:
//   fwd   y = x W^T        (R, out) = (R, in) (out, in)^T       for q, k, gate, o, down
//   dx    dx = dy W        (R, in) = (R, out) (out, in)
//   dW    dW += dy^T x     (out, in) += (R, out)^T (R, in), beta 1
// and the LM head's block of --head-rows rows: logits = hf Wlm^T, dhf = dlogits Wlm,
// dWlm += dlogits^T hf.
// Output: one tab-separated line per timed call (after one untimed call of each shape):
//   name  group  shape  M  N  K  flops  seconds
#if defined(STREAMBP_BLAS_MKL)
#include <mkl_cblas.h>
#else
#include <cblas.h>
#endif

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Gemm {
  std::string group, shape;
  int64_t M, N, K;
  bool ta, tb;
  float beta;
};

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return def;
}
std::string sarg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}
std::vector<int64_t> list_arg(int argc, char** argv, const char* name, const char* def) {
  std::vector<int64_t> out;
  const std::string s = sarg(argc, argv, name, def);
  for (size_t pos = 0; pos < s.size();) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::atoll(s.substr(pos, comma - pos).c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// Values in [-0.5, 0.5): what they are does not matter to the speed, only that they are finite
// and not denormal.
void fill(std::vector<float>& v, uint64_t seed) {
  for (float& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(seed >> 40) / static_cast<float>(1 << 24) - 0.5f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string name = sarg(argc, argv, "--name", "blas");
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 3));
  const int64_t d = arg(argc, argv, "--d", 1024), qd = arg(argc, argv, "--qdim", 2048);
  const int64_t kvd = arg(argc, argv, "--kvdim", 1024), F = arg(argc, argv, "--F", 3072);
  const int64_t V = arg(argc, argv, "--V", 151936), hr = arg(argc, argv, "--head-rows", 512);

  std::vector<Gemm> gemms;
  struct Proj {
    const char* name;
    int64_t out, in;
  };
  const Proj projs[] = {{"q", qd, d}, {"k", kvd, d}, {"gate", F, d}, {"o", d, qd}, {"down", d, F}};
  for (int64_t R : list_arg(argc, argv, "--rows", "256,512,1024,2048,4096")) {
    const std::string r = " R=" + std::to_string(R);
    for (const Proj& p : projs)
      gemms.push_back({"fwd x W^T" + r, p.name, R, p.out, p.in, false, true, 0.0f});
    for (const Proj& p : projs)
      gemms.push_back({"dx = dy W" + r, p.name, R, p.in, p.out, false, false, 0.0f});
    for (const Proj& p : projs)
      gemms.push_back({"dW += dy^T x" + r, p.name, p.out, p.in, R, true, false, 1.0f});
  }
  const std::string h = " R=" + std::to_string(hr);
  gemms.push_back({"head logits = hf W^T" + h, "lm_head", hr, V, d, false, true, 0.0f});
  gemms.push_back({"head dhf = dlogits W" + h, "lm_head", hr, d, V, false, false, 0.0f});
  gemms.push_back({"head dW += dlogits^T hf" + h, "lm_head", V, d, hr, true, false, 1.0f});

  for (const Gemm& g : gemms) {
    const int64_t ar = g.ta ? g.K : g.M, ac = g.ta ? g.M : g.K;  // A as stored
    const int64_t br = g.tb ? g.N : g.K, bc = g.tb ? g.K : g.N;  // B as stored
    std::vector<float> A(static_cast<size_t>(ar * ac)), B(static_cast<size_t>(br * bc)),
        C(static_cast<size_t>(g.M * g.N));
    fill(A, 1);
    fill(B, 2);
    fill(C, 3);
    auto call = [&] {
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), 1.0f,
                  A.data(), static_cast<int>(ac), B.data(), static_cast<int>(bc), g.beta, C.data(),
                  static_cast<int>(g.N));
    };
    call();                          // warms caches, pages and the thread pool
    if (g.beta != 0.0f) fill(C, 3);  // keep accumulated values from growing across calls
    const double flops =
        2.0 * static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      call();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s\t%s\t%s\t%lld\t%lld\t%lld\t%.0f\t%.6f\n", name.c_str(), g.group.c_str(),
                  g.shape.c_str(), static_cast<long long>(g.M), static_cast<long long>(g.N),
                  static_cast<long long>(g.K), flops, s);
    }
    std::fflush(stdout);
  }
  return 0;
}
