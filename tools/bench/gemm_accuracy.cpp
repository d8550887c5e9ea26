// gemm_accuracy: how an F32 x BF16 product of a bf16 step could run on a GPU, each way emulated
// on the CPU bit for bit, against float64 (issue 27, item 3). Plain C++, no GPU.
//
// The mixed products of a bf16 step are the backward's: dX = dY W and dW += dY^T X, with dY the
// fp32 activation gradient and W, X bf16. Ways an fp32 operand can enter a GEMM:
//   fp32    the BF16 operand widened (exact), fp32 x fp32 products, fp32 accumulation: what the
//           CUDA backend did before (CUBLAS_COMPUTE_32F, CUDA cores) and what the CPU backend
//           does (OpenBLAS sgemm on widened panels, cpu/gemm_bf16.cpp): the reference path;
//   split2  dY = hi + lo (bf16 parts), two bf16 tensor-core GEMMs into one fp32 C (beta = 1);
//   split3  dY = hi + mid + lo (gemm_split.h), three such GEMMs: what gemm.cu does;
//   tf32    dY rounded to TF32 (10 stored mantissa bits, nearest even), the BF16 operand exact
//           in TF32, fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_TF32);
//   bf16    dY rounded to bf16 (autocast's choice of keeping the gradient in bf16).
// Every product of two bf16 (or tf32 x bf16) values is exact in fp32, so each option is exactly
// "round the operand, then accumulate in fp32". Accumulation is modelled as one fp32 FMA chain
// over K per GEMM (the partial GEMMs of a split each their own chain, added into C in order
// lo, mid, hi, each add rounded once, as beta = 1 does); a tensor core adds in short blocks, which
// is no less accurate than one long chain, so the numbers are an upper bound for every option
// alike. The float64 reference sums the exact products (a bf16 x fp32 product is exact in
// double).
//
// Operands are shaped like a gradient: each dot product is one output element, sampled at
// random; dX's row of dY has one row scale, dW's column of dY spans n rows whose scales differ
// (per-token loss weights, 1e-4 .. 1, log-uniform); entries are normal with 1% outliers x10.
// Weights are bf16(N(0, 0.02)), activations bf16(N(0, 1)) with 1% outlier channels x20.
//
// Usage: gemm_accuracy [--samples N] [--seed S]. Prints one markdown table per shape set.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm_split.h"
#include "backend/cuda/kernel_math.h"

namespace {

using sbp::cuda::bf16_to_float;
using sbp::cuda::float_to_bf16;

float bf16_round(float x) { return bf16_to_float(float_to_bf16(x)); }

// TF32: fp32 with the low 13 mantissa bits rounded away, nearest even.
float tf32_round(float x) {
  uint32_t u = sbp::cuda::f32_bits(x);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return x;
  const uint32_t rounding = 0xfffu + ((u >> 13) & 1u);
  u = (u + rounding) & ~0x1fffu;
  return sbp::cuda::bits_f32(u);
}

// x as `parts` bf16 parts (gemm_split.h's rule, any count).
std::vector<float> parts_of(float x, int parts) {
  std::vector<float> p;
  float rest = x;
  for (int i = 0; i < parts; ++i) {
    p.push_back(bf16_round(rest));
    rest -= p.back();
  }
  return p;
}

// fp32 FMA chain over k of a[k] * b[k].
float chain(const std::vector<float>& a, const std::vector<float>& b) {
  float acc = 0.0f;
  for (size_t k = 0; k < a.size(); ++k) acc = std::fma(a[k], b[k], acc);
  return acc;
}

enum Option { kFp32, kSplit2, kSplit3, kTf32, kBf16, kOptions };
const char* kNames[kOptions] = {"fp32 (CPU, old CUDA)", "split2", "split3 (chosen)", "tf32",
                                "bf16 gradient"};

// One output element under each option.
float emulate(Option o, const std::vector<float>& a, const std::vector<float>& b) {
  const size_t K = a.size();
  std::vector<float> r(K);
  switch (o) {
    case kFp32:
      return chain(a, b);
    case kTf32:
      for (size_t k = 0; k < K; ++k) r[k] = tf32_round(a[k]);
      return chain(r, b);
    case kBf16:
      for (size_t k = 0; k < K; ++k) r[k] = bf16_round(a[k]);
      return chain(r, b);
    case kSplit2:
    case kSplit3: {
      const int parts = o == kSplit2 ? 2 : sbp::cuda::kSplitParts;
      std::vector<std::vector<float>> p(static_cast<size_t>(parts), std::vector<float>(K));
      for (size_t k = 0; k < K; ++k) {
        if (parts == sbp::cuda::kSplitParts) {  // the kernel's own function
          const sbp::cuda::Bf16Parts s = sbp::cuda::split_bf16(a[k]);
          for (int i = 0; i < parts; ++i) p[static_cast<size_t>(i)][k] = bf16_to_float(s.p[i]);
        } else {
          const std::vector<float> s = parts_of(a[k], parts);
          for (int i = 0; i < parts; ++i) p[static_cast<size_t>(i)][k] = s[static_cast<size_t>(i)];
        }
      }
      float c = 0.0f;  // lo first, hi last: each GEMM adds its chain into C with beta = 1
      for (int i = parts - 1; i >= 0; --i) c = chain(p[static_cast<size_t>(i)], b) + c;
      return c;
    }
    default:
      return 0.0f;
  }
}

struct Shape {
  std::string what;  // the GEMM it stands for
  int64_t K;         // inner dimension
  bool dw;           // dW += dY^T X: the dY column spans rows of different scales
};

struct Stats {
  double median_rel = 0, p99_rel = 0, max_normwise = 0;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

void run_set(const char* title, const std::vector<Shape>& shapes, int samples, uint64_t seed) {
  std::printf("\n### %s\n\n", title);
  std::printf("| GEMM | K | option | median rel. error | p99 rel. error | max |err| / sum|ab| | median vs fp32 |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|\n");
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  auto outlier = [&](double factor) { return uni(gen) < 0.01 ? factor : 1.0; };
  for (const Shape& sh : shapes) {
    const size_t K = static_cast<size_t>(sh.K);
    std::vector<std::vector<double>> rel(kOptions), normwise(kOptions);
    for (int s = 0; s < samples; ++s) {
      std::vector<float> a(K), b(K);
      const double row_scale = std::pow(10.0, -4.0 * uni(gen));
      for (size_t k = 0; k < K; ++k) {
        const double scale = sh.dw ? std::pow(10.0, -4.0 * uni(gen)) : row_scale;
        a[k] = static_cast<float>(scale * normal(gen) * outlier(10.0));
        // dX: b is a weight column; dW: b is an activation column (one channel over n rows).
        b[k] = sh.dw ? bf16_round(static_cast<float>(normal(gen) * outlier(20.0)))
                     : bf16_round(static_cast<float>(0.02 * normal(gen)));
      }
      double ref = 0.0, mag = 0.0;
      for (size_t k = 0; k < K; ++k) {
        ref += static_cast<double>(a[k]) * static_cast<double>(b[k]);
        mag += std::fabs(static_cast<double>(a[k]) * static_cast<double>(b[k]));
      }
      for (int o = 0; o < kOptions; ++o) {
        const double err = std::fabs(static_cast<double>(emulate(static_cast<Option>(o), a, b)) - ref);
        rel[static_cast<size_t>(o)].push_back(ref != 0.0 ? err / std::fabs(ref) : 0.0);
        normwise[static_cast<size_t>(o)].push_back(mag > 0.0 ? err / mag : 0.0);
      }
    }
    Stats st[kOptions];
    for (int o = 0; o < kOptions; ++o) {
      st[o].median_rel = quantile(rel[static_cast<size_t>(o)], 0.5);
      st[o].p99_rel = quantile(rel[static_cast<size_t>(o)], 0.99);
      st[o].max_normwise = quantile(normwise[static_cast<size_t>(o)], 1.0);
    }
    for (int o = 0; o < kOptions; ++o)
      std::printf("| %s | %lld | %s | %.2e | %.2e | %.2e | %.2f |\n", sh.what.c_str(),
                  static_cast<long long>(sh.K), kNames[o], st[o].median_rel, st[o].p99_rel,
                  st[o].max_normwise, st[o].median_rel / st[kFp32].median_rel);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 2000;
  uint64_t seed = 27;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--samples" && i + 1 < argc) {
      samples = std::max(10, std::atoi(argv[++i]));
    } else if (f == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: gemm_accuracy [--samples N] [--seed S]\n");
      return 2;
    }
  }
  std::printf("gemm_accuracy: %d sampled output elements per shape, seed %llu\n", samples,
              static_cast<unsigned long long>(seed));
  // Qwen3-0.6B: d 1024, F 3072, 16 x 128 query heads (Hh 2048), 8 x 128 kv heads (Gh 1024),
  // layer chunks of 512 rows.
  run_set("Qwen3-0.6B layer shapes, 512-row chunks",
          {{"dX down_proj: (n,d)(d,F)", 1024, false},
           {"dX gate/up_proj: (n,F)(F,d)", 3072, false},
           {"dX q_proj: (n,Hh)(Hh,d)", 2048, false},
           {"dX o/k/v_proj: K = d or Gh", 1024, false},
           {"dW any projection: (out,n)(n,in)", 512, true}},
          samples, seed);
  // tiny-qwen3 (the tests' model): d 64, F 160, Hh 96, Gh 48, chunks of 32 rows.
  run_set("tiny-qwen3 shapes, 32-row chunks",
          {{"dX down_proj", 64, false},
           {"dX gate/up_proj", 160, false},
           {"dX q_proj", 96, false},
           {"dX k/v_proj", 48, false},
           {"dW any projection", 32, true}},
          samples, seed + 1);
  return 0;
}
