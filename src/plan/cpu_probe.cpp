#include "plan/cpu_probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>


#include "backend/backend_factory.h"
#include "backend/cpu_threads.h"
#include "backend/sgemm_probe.h"
#include "core/ledger.h"
#include "core/pool.h"

namespace sbp {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Mean seconds of one call of `op` over at least 5 calls and 30 ms (one untimed call first:
// first touch, BLAS buffers). The mean, not the median: on a machine whose cores other
// programs share, a call shorter than a scheduler slice mostly runs alone, and the median of
// such calls is the idle machine's rate, while a step of many calls gets the machine's share;
// over 30 ms the probe gets that share too.
double mean_seconds(const std::function<void()>& op) {
  op();
  int n = 0;
  const auto t0 = Clock::now();
  double total = 0.0;
  while (n < 5 || total < 0.03) {
    op();
    ++n;
    total = seconds_since(t0);
  }
  return total / n;
}

// GEMMs above this many FLOPs are probed cut down to it (their rate is already the large
// GEMM's; the probe's time is what matters here).
constexpr double kMaxProbeFlops = 2e9;
// At most this many shapes are probed (the rest get the probed shapes' rate together); in
// FLOP order they cover a step's GEMMs to well past 99%.
constexpr size_t kMaxProbedShapes = 40;

GemmShape cut_down(GemmShape g) {
  while (g.flops() > kMaxProbeFlops) {
    int64_t* biggest = g.M >= g.N && g.M >= g.K ? &g.M : (g.N >= g.K ? &g.N : &g.K);
    *biggest = (*biggest + 1) / 2;
  }
  return g;
}

// Operands of one GEMM call: A as the call stored it, (M, K) or (K, M) transposed; B (K, N)
// or (N, K); small values, not zeros (no denormals or zeros a kernel might short-cut).
double time_gemm_on(Backend& be, Pool& pool, const GemmShape& g) {
  auto filled = [&](DType dt, int64_t rows, int64_t cols) {
    Buffer b = pool.allocate(Category::other, dt, {rows, cols});
    be.fill(b.view(), 0.01f);
    return b;
  };
  const Buffer A = g.trans_a ? filled(g.a, g.K, g.M) : filled(g.a, g.M, g.K);
  const Buffer B = g.trans_b ? filled(g.b, g.N, g.K) : filled(g.b, g.K, g.N);
  const Buffer C = pool.zeros(Category::other, g.c, {g.M, g.N});
  return mean_seconds([&] {
    be.gemm(C.view(), A.view(), g.trans_a, B.view(), g.trans_b, 1.0f, g.accumulate ? 1.0f : 0.0f);
  });
}

struct Probe {
  std::unique_ptr<Backend> be = make_backend(BackendSpec{BackendKind::cpu});
  Ledger ledger;
  Pool pool{ledger, *be};

  Buffer zeros(DType dt, int64_t rows, int64_t cols) {
    return pool.zeros(Category::other, dt, {rows, cols});
  }
  // Small values, not zeros: no denormals or exact zeros that a kernel might short-cut.
  Buffer filled(DType dt, int64_t rows, int64_t cols, float v = 0.01f) {
    Buffer b = pool.allocate(Category::other, dt, {rows, cols});
    be->fill(b.view(), v);
    return b;
  }

  // Bytes per second of one family's op, as the profile counts bytes and times the kernel.
  double family_rate(OpFamily f, const std::function<void()>& op) {
    OpProfile prof;
    op();  // untimed: first touch
    be->set_profile(&prof);
    const auto t0 = Clock::now();
    int n = 0;
    while (n < 5 || seconds_since(t0) < 0.03) {
      op();
      ++n;
    }
    be->set_profile(nullptr);
    const OpTotals& t = prof[f];
    return t.seconds > 0.0 ? double(t.bytes) / t.seconds : 0.0;
  }
};

}  // namespace

double time_gemm(Backend& be, const GemmShape& g) {
  Ledger ledger;
  Pool pool(ledger, be);
  const GemmShape small = cut_down(g);
  return time_gemm_on(be, pool, small) * g.flops() / small.flops();
}

GemmShape largest_gemm(const OpProfile& ops) {
  GemmShape best{.M = 256, .N = 256, .K = 256};
  double most = -1.0;
  for (const GemmCount& g : ops.gemms()) {
    if (double(g.calls) * g.shape.flops() > most) {
      most = double(g.calls) * g.shape.flops();
      best = g.shape;
    }
  }
  return best;
}

DeviceProfile probe_cpu_profile(const OpProfile& ops, const ModelConfig& cfg,
                                const CpuProbeShape& shape) {
  Probe p;
  DeviceProfile dev;
  dev.gpu = false;
  dev.measured = true;
  dev.name = "cpu, " + std::to_string(cpu_threads()) + " threads";
  dev.source = "measured now by probes of this step's shapes (plan/cpu_probe.h)";
  dev.peak_flops = measure_sgemm_gflops(1024, 3) * 1e9;  // the MFU yardstick

  // GEMMs: the largest shapes by the step's FLOPs.
  std::vector<GemmCount> by_flops = ops.gemms();
  std::sort(by_flops.begin(), by_flops.end(), [](const GemmCount& x, const GemmCount& y) {
    return double(x.calls) * x.shape.flops() > double(y.calls) * y.shape.flops();
  });
  double probed_flops = 0.0, probed_seconds = 0.0;
  for (size_t i = 0; i < by_flops.size() && i < kMaxProbedShapes; ++i) {
    const GemmShape& g = by_flops[i].shape;
    const GemmShape small = cut_down(g);
    const double s = time_gemm_on(*p.be, p.pool, small) * g.flops() / small.flops();
    dev.gemm_table.push_back(MeasuredGemm{g, s});
    probed_flops += g.flops();
    probed_seconds += s;
  }
  dev.gemm_fallback_flops = probed_seconds > 0.0 ? probed_flops / probed_seconds : dev.peak_flops;

  // Attention: q = the last `rows` rows of `keys` (every row sees its whole causal prefix), cut
  // down until one call is ~2 GFLOP.
  const int64_t H = cfg.num_attention_heads, G = cfg.num_key_value_heads, h = cfg.head_dim;
  const DType act = shape.act_dtype;
  int64_t keys = std::max<int64_t>(shape.keys, 1);
  int64_t rows = std::clamp<int64_t>(shape.rows, 1, keys);
  while (rows > 64 && 4.0 * double(H * h) * double(rows) * double(keys) > kMaxProbeFlops) {
    keys = std::max<int64_t>(keys / 2, 1);
    rows = std::min(rows, keys);
  }
  {
    AttentionDims dims{.n_heads = H, .n_kv_heads = G, .head_dim = h,
                       .scale = 1.0f / std::sqrt(float(h))};
    const Buffer q = p.filled(act, rows, H * h), k = p.filled(act, keys, G * h),
                 v = p.filled(act, keys, G * h), out = p.zeros(act, rows, H * h),
                 lse = p.zeros(DType::F32, rows, H), seg = p.zeros(DType::I32, keys, 1),
                 dq = p.zeros(DType::F32, rows, H * h), dk = p.zeros(DType::F32, keys, G * h),
                 dv = p.zeros(DType::F32, keys, G * h), dout = p.filled(act, rows, H * h);
    const int64_t q_offset = keys - rows;
    auto fwd = [&] {
      p.be->attention_forward(out.view(), lse.view(), q.view(), k.view(), v.view(), seg.view(),
                              q_offset, dims);
    };
    auto bwd = [&] {
      p.be->attention_backward(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                               v.view(), out.view(), lse.view(), seg.view(), q_offset, dims);
    };
    p.be->reset_flops();
    fwd();
    const double f_fwd = double(p.be->flops());
    p.be->reset_flops();
    bwd();
    const double f_bwd = double(p.be->flops());
    dev.attention_forward_flops = f_fwd / mean_seconds(fwd);
    dev.attention_backward_flops = f_bwd / mean_seconds(bwd);
  }

  // Memory-bound families at a chunk's size.
  const int64_t n = std::max<int64_t>(shape.rows, 1), d = cfg.hidden_size,
                F = cfg.intermediate_size, V = cfg.vocab_size;
  {
    const Buffer x = p.filled(act, n, d), y = p.filled(act, n, d), g = p.filled(act, 1, d);
    dev.family_bytes_per_s[size_t(OpFamily::elementwise)] =
        p.family_rate(OpFamily::elementwise, [&] { p.be->add_inplace(y.view(), x.view()); });
    dev.family_bytes_per_s[size_t(OpFamily::norm)] = p.family_rate(
        OpFamily::norm, [&] { p.be->rmsnorm_forward(y.view(), x.view(), g.view(), 1e-6f); });
    const Buffer x32 = p.filled(DType::F32, n, d);
    dev.family_bytes_per_s[size_t(OpFamily::copy)] =
        p.family_rate(OpFamily::copy, [&] { p.be->copy(y.view(), x32.view()); });
  }
  {
    const Buffer gate = p.filled(act, n, F), up = p.filled(act, n, F), out = p.zeros(act, n, F);
    dev.family_bytes_per_s[size_t(OpFamily::glu)] = p.family_rate(
        OpFamily::glu, [&] { p.be->swiglu_forward(out.view(), gate.view(), up.view()); });
  }
  {
    const int64_t c = std::max<int64_t>(shape.head_rows, 1);
    const Buffer logits = p.filled(act, c, V), lse = p.zeros(DType::F32, c, 1),
                 logp = p.zeros(DType::F32, c, 1), targets = p.zeros(DType::I32, c, 1),
                 dlogp = p.filled(DType::F32, c, 1);
    // The forward's log-softmax and the backward's dlogits, together: the family's two big ops.
    dev.family_bytes_per_s[size_t(OpFamily::head_softmax)] =
        p.family_rate(OpFamily::head_softmax, [&] {
          p.be->logsoftmax_target(lse.view(), logp.view(), logits.view(), targets.view());
          p.be->dlogits_inplace(logits.view(), lse.view(), targets.view(), dlogp.view());
        });
  }
  // rope, embedding and the optimizer: the elementwise rate.
  dev.memory_bytes_per_s = dev.family_bytes_per_s[size_t(OpFamily::elementwise)];

  // One op's fixed cost: the checks, the dispatch and an OpenMP region, on a one-row op.
  {
    const Buffer a = p.filled(DType::F32, 1, 16), b = p.filled(DType::F32, 1, 16);
    dev.op_latency_s = mean_seconds([&] { p.be->add_inplace(a.view(), b.view()); });
  }
  dev.host_link_bytes_per_s = dev.memory_bytes_per_s;
  dev.host_memory_bytes_per_s = dev.memory_bytes_per_s;
  return dev;
}

}  // namespace sbp
