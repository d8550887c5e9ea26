// Log-softmax of the target token and the in-place logits gradient, one row at a time, so
// the LM head never needs more than the (n, V) block it is given. The logits may be F32 or BF16
// (storage.h): read as fp32, statistics in fp32, a BF16 gradient rounded once per element.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/reduce.h"
#include "backend/cpu/storage.h"
#include "backend/cpu/vec_math.h"

namespace sbp {

namespace {

using cpu::load;
using cpu::store;

// Targets index the logits row: checked here, where the data is, before the parallel loops.
// (Negative targets mean "no target".)
void check_targets(const Tensor& targets, int64_t vocab) {
  const int32_t* p = targets.i32();
  for (int64_t i = 0; i < targets.numel(); ++i) {
    SBP_CHECK(p[i] < vocab, "target id " + std::to_string(p[i]) + " outside the vocabulary of " +
                                std::to_string(vocab));
  }
}

template <class TL>
void logsoftmax_target_kernel(float* plse, float* plogp, const TL* pl, const int32_t* pt, int64_t n,
                              int64_t V) {  // plse, plogp, pt (n); pl (n, V)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const TL* row = pl + i * V;
    const float mx = cpu::lane_max(V, -INFINITY, [&](int64_t j) { return load(row[j]); });
    // Sum in fp64 lanes (vectorised). fp32 lanes lost the vocabulary's tail: once a lane holds
    // the top token's exp(0) = 1, every later term below half its ulp (6e-8) adds nothing, and
    // tens of thousands of such terms are a mass of ~1e-5. On SmolLM2-135M (V = 49,152) that
    // biased every log-prob by ~1e-5 against a float64 reference (transformers' fp32 forward,
    // which sums pairwise: 2.5e-7 on the loss); tools/gguf_score_parity.py measures it.
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < V; ++j) sum += static_cast<double>(cpu::exp_f32(load(row[j]) - mx));
    const float log_sum = static_cast<float>(std::log(sum));
    plse[i] = mx + log_sum;
    // (x_t - max) is exact for nearby values; subtracting the rounded lse instead would lose
    // the low bits when the logits are large.
    plogp[i] = pt[i] >= 0 ? (load(row[pt[i]]) - mx) - log_sum : 0.0f;
  }
}

template <class TL>
void dlogits_kernel(TL* pl, const float* plse, const int32_t* pt, const float* pw, int64_t n,
                    int64_t V) {  // pl (n, V) in: logits, out: dL/dlogits; plse, pt, pw (n)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    TL* row = pl + i * V;
    const float w = pt[i] >= 0 ? pw[i] : 0.0f;
    const float l = plse[i];
    // BF16: the target's gradient is finished in fp32 below, from its logit read here, so
    // that it is rounded once.
    const float zt = pt[i] >= 0 ? load(row[pt[i]]) : 0.0f;
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) store(row[j], -w * cpu::exp_f32(load(row[j]) - l));
    if (pt[i] >= 0) {
      if constexpr (cpu::is_bf16<TL>) {
        store(row[pt[i]], -w * cpu::exp_f32(zt - l) + w);
      } else {
        row[pt[i]] += w;
      }
    }
  }
}

template <class TL>
void argmax_kernel(int32_t* po, const TL* pl, int64_t n, int64_t V) {  // po (n), pl (n, V)
#pragma omp parallel for schedule(static) if (n * V > cpu::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const TL* row = pl + i * V;
    int64_t best = 0;
    for (int64_t j = 1; j < V; ++j)
      if (load(row[j]) > load(row[best])) best = j;
    po[i] = static_cast<int32_t>(best);
  }
}

}  // namespace

void CpuBackend::logsoftmax_target_impl(const Tensor& lse, const Tensor& logp, const Tensor& logits,
                                        const Tensor& targets) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(targets, V);
  cpu::with_float_data(
      [&](const auto* pl) {
        logsoftmax_target_kernel(lse.f32(), logp.f32(), pl, targets.i32(), n, V);
      },
      logits);
}

void CpuBackend::dlogits_inplace_impl(const Tensor& logits, const Tensor& lse,
                                      const Tensor& targets, const Tensor& dlogp) {
  const int64_t n = logits.rows(), V = logits.cols();
  check_targets(targets, V);
  cpu::with_float_data(
      [&](auto* pl) { dlogits_kernel(pl, lse.f32(), targets.i32(), dlogp.f32(), n, V); }, logits);
}

void CpuBackend::argmax_rows_impl(const Tensor& out, const Tensor& logits) {
  cpu::with_float_data(
      [&](const auto* pl) { argmax_kernel(out.i32(), pl, logits.rows(), logits.cols()); }, logits);
}

}  // namespace sbp
