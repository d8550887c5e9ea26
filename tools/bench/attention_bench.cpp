// attention_bench: achieved GFLOP/s of the CPU attention kernels against the machine's sgemm,
// measured in the same run with the same thread count.
//
//   attention_bench [--T 4096] [--H 16] [--G 8] [--h 128] [--segments 1] [--window 0]
//                   [--reps 3] [--threads N] [--clock wall|cpu] [--json FILE]
//
// --window W > 0 runs sliding-window attention (each row sees its last W keys).
//
// --clock cpu times with the process CPU clock divided by the thread count instead of the wall
// clock: on a machine shared with other work it estimates what an idle machine would show
// (it counts OpenMP spin-waiting as work, so it errs on the slow side).
//
// GFLOP/s use the FLOPs the kernels count (multiply-adds x 2 of every tile product they
// compute, masked waste included); "useful" is the exact causal (or windowed) count (forward
// 4*h per allowed (query, key) pair and head, backward 10*h), so useful/counted is the tiling
// efficiency.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/blas.h"
#include "core/rng.h"

#include "bench_clock.h"

namespace {

using sbp::bench::Clock;

// Best-of-reps seconds of fn().
template <class F>
double best_time(const Clock& clock, int reps, F&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = clock.now();
    fn();
    best = std::min(best, clock.now() - t0);
  }
  return best;
}

double sgemm_gflops(const Clock& clock, int64_t n, int reps) {
  std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size());
  sbp::Rng rng(7, "sgemm");
  for (float& x : a) x = rng.normal();
  for (float& x : b) x = rng.normal();
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(n), 1.0f, a.data(), static_cast<int>(n), b.data(),
                static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
  };
  run();  // warm-up: thread pool, page faults
  return 2.0 * static_cast<double>(n) * n * n / best_time(clock, reps, run) * 1e-9;
}

int64_t arg(int argc, char** argv, const char* name, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return def;
}
std::string sarg(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  using sbp::DType;
  using sbp::Shape;
  using sbp::Tensor;
  const int64_t T = arg(argc, argv, "--T", 4096);
  const int64_t H = arg(argc, argv, "--H", 16);
  const int64_t G = arg(argc, argv, "--G", 8);
  const int64_t h = arg(argc, argv, "--h", 128);
  const int64_t n_seg = std::max<int64_t>(1, arg(argc, argv, "--segments", 1));
  const int64_t window = std::max<int64_t>(0, arg(argc, argv, "--window", 0));
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 3));
  const int64_t threads = arg(argc, argv, "--threads", 0);
  const std::string json = sarg(argc, argv, "--json");
  const std::string clock_name = sarg(argc, argv, "--clock");
  if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
  const int nthreads = omp_get_max_threads();
  if (!clock_name.empty() && clock_name != "wall" && clock_name != "cpu") {
    std::fprintf(stderr, "attention_bench: --clock must be wall or cpu, not %s\n",
                 clock_name.c_str());
    return 2;
  }
  const Clock clock{clock_name == "cpu", nthreads};

  // (T, H*h) queries, (T, G*h) keys and values, equal segments
  std::vector<float> q(static_cast<size_t>(T * H * h)), k(static_cast<size_t>(T * G * h)),
      v(k.size()), dout(q.size()), out(q.size()), lse(static_cast<size_t>(T * H)), dq(q.size()),
      dk(k.size()), dv(k.size());
  sbp::Rng rng(1, "attention_bench");
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = rng.normal();
  std::vector<int32_t> seg(static_cast<size_t>(T));
  const int64_t seg_len = (T + n_seg - 1) / n_seg;
  double pairs = 0.0;  // allowed (query, key) pairs per head
  for (int64_t i = 0; i < T; ++i) {
    seg[static_cast<size_t>(i)] = static_cast<int32_t>(i / seg_len * seg_len);
    const int64_t first =
        std::max<int64_t>(seg[static_cast<size_t>(i)], window > 0 ? i - window + 1 : 0);
    pairs += static_cast<double>(i - first + 1);
  }
  auto view = [](std::vector<float>& x, int64_t r, int64_t c) {
    return Tensor(x.data(), DType::F32, Shape{r, c});
  };
  const Tensor tq = view(q, T, H * h), tk = view(k, T, G * h), tv = view(v, T, G * h),
               tdout = view(dout, T, H * h), tout = view(out, T, H * h), tlse = view(lse, T, H),
               tdq = view(dq, T, H * h), tdk = view(dk, T, G * h), tdv = view(dv, T, G * h);
  const Tensor tseg(seg.data(), DType::I32, Shape{T});
  const sbp::AttentionDims dims{H, G, h, 1.0f / std::sqrt(static_cast<float>(h)), window};

  const double sgemm = sgemm_gflops(clock, 1024, reps);

  int64_t fwd_flops = 0, bwd_flops = 0;
  auto fwd = [&] {
    fwd_flops = 0;
    sbp::cpu::attention_forward(tout, tlse, tq, tk, tv, tseg, 0, dims, &fwd_flops);
  };
  auto bwd = [&] {
    bwd_flops = 0;
    sbp::cpu::attention_backward(tdq, tdk, tdv, tdout, tq, tk, tv, tout, tlse, tseg, 0, dims,
                                 &bwd_flops);
  };
  fwd();  // warm-up, and the out/lse the backward needs
  const double t_fwd = best_time(clock, reps, fwd);
  bwd();
  const double t_bwd = best_time(clock, reps, bwd);

  const double useful_fwd = 4.0 * h * H * pairs, useful_bwd = 10.0 * h * H * pairs;
  const double g_fwd = fwd_flops / t_fwd * 1e-9, g_bwd = bwd_flops / t_bwd * 1e-9;
  std::printf(
      "attention T=%lld H=%lld G=%lld h=%lld segments=%lld window=%lld threads=%d (best of %d, %s "
      "clock)\n",
      static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(G),
      static_cast<long long>(h), static_cast<long long>(n_seg), static_cast<long long>(window),
      nthreads, reps, clock.cpu ? "cpu" : "wall");
  std::printf("  sgemm 1024^3        %8.1f GFLOP/s\n", sgemm);
  std::printf("  forward   %8.3f s %8.1f GFLOP/s  %5.1f%% of sgemm  (useful/counted %.3f)\n", t_fwd,
              g_fwd, 100.0 * g_fwd / sgemm, useful_fwd / static_cast<double>(fwd_flops));
  std::printf("  backward  %8.3f s %8.1f GFLOP/s  %5.1f%% of sgemm  (useful/counted %.3f)\n", t_bwd,
              g_bwd, 100.0 * g_bwd / sgemm, useful_bwd / static_cast<double>(bwd_flops));
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\"T\": " << T << ", \"H\": " << H << ", \"G\": " << G << ", \"h\": " << h
      << ", \"segments\": " << n_seg << ", \"window\": " << window << ", \"threads\": " << nthreads
      << ", \"clock\": \"" << (clock.cpu ? "cpu" : "wall") << "\""
      << ", \"sgemm_gflops\": " << sgemm << ", \"forward_s\": " << t_fwd
      << ", \"forward_gflops\": " << g_fwd << ", \"forward_flops\": " << fwd_flops
      << ", \"backward_s\": " << t_bwd << ", \"backward_gflops\": " << g_bwd
      << ", \"backward_flops\": " << bwd_flops << "}\n";
  }
  return 0;
}
