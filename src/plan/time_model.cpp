#include "plan/time_model.h"

#include <algorithm>

#include "core/error.h"

namespace sbp {

double matmul_parameters(const ModelConfig& cfg) {
  const double d = double(cfg.hidden_size), F = double(cfg.intermediate_size);
  const double q = double(cfg.num_attention_heads * cfg.head_dim);
  const double kv = double(cfg.num_key_value_heads * cfg.head_dim);
  const double layer = d * (q + 2.0 * kv) + q * d + 3.0 * d * F;  // q, k, v, o; gate, up, down
  return double(cfg.num_hidden_layers) * layer + double(cfg.vocab_size) * d;
}

ModelFlops model_flops(const ModelConfig& cfg, const std::vector<int64_t>& seq_lens) {
  const double per_pair = 12.0 * double(cfg.num_attention_heads * cfg.head_dim);  // fwd + bwd
  const double dense = 6.0 * matmul_parameters(cfg);
  ModelFlops f;
  for (const int64_t n64 : seq_lens) {
    const double n = double(n64);
    f.raw += dense * n;
    f.causal += dense * n;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      f.raw += per_pair * n * n;
      const double w = double(cfg.layer_window(l));
      // Causal pairs: row i sees min(i + 1, w) keys.
      const double pairs = (w <= 0.0 || w >= n) ? n * (n + 1.0) / 2.0
                                                : w * (w + 1.0) / 2.0 + (n - w) * w;
      f.causal += per_pair * pairs;
    }
  }
  return f;
}

namespace {

double at_least_tiny(double x) { return std::max(x, 1e-30); }

// A GPU GEMM: bf16 tensor cores, split3 (3 passes) when one operand is F32, CUDA cores when
// both are (docs/CUDA.md's GEMM table); bound by the larger of compute and memory time.
double gpu_gemm_seconds(const GemmShape& g, const DeviceProfile& dev) {
  const bool a32 = g.a == DType::F32, b32 = g.b == DType::F32;
  double compute = 0.0;
  if (a32 && b32)
    compute = g.flops() / at_least_tiny(dev.fp32_flops * dev.gemm_efficiency);
  else
    compute = (a32 || b32 ? 3.0 : 1.0) * g.flops() /
              at_least_tiny(dev.peak_flops * dev.gemm_efficiency);
  const double memory = g.bytes() / at_least_tiny(dev.memory_bytes_per_s);
  return std::max(compute, memory);
}

double family_rate(const DeviceProfile& dev, OpFamily f) {
  const double r = dev.family_bytes_per_s[static_cast<size_t>(f)];
  return r > 0.0 ? r : dev.memory_bytes_per_s;
}

// Ring algorithms: all-reduce moves 2 (r-1)/r of the buffer through each rank's link,
// reduce-scatter and all-gather (r-1)/r each; a broadcast or reduce of one rank's rows to every
// rank of the group, pipelined, about the buffer once.
double collective_seconds(const CollectiveBytes& b, int r, double link) {
  if (r <= 1 || b.total() == 0) return 0.0;
  const double f = double(r - 1) / double(r);
  const double moved = 2.0 * f * double(b.allreduce) +
                       f * double(b.reduce_scatter + b.allgather) +
                       f * double(b.broadcast + b.reduce);
  return moved / at_least_tiny(link);
}

}  // namespace

double gemm_seconds(const GemmShape& g, const DeviceProfile& dev) {
  if (dev.gpu) return gpu_gemm_seconds(g, dev) + dev.op_latency_s;
  for (const MeasuredGemm& m : dev.gemm_table)
    if (m.shape == g) return m.seconds;
  SBP_CHECK(dev.gemm_fallback_flops > 0.0, "time model: no rate for a GEMM shape on " + dev.name);
  return g.flops() / dev.gemm_fallback_flops + dev.op_latency_s;
}

StepTime predict_step_time(const OpProfile& ops, const PlannedStep& step,
                           const DeviceProfile& dev, const StepShape& shape) {
  StepTime t;
  // Every op, in issue order: the engine runs them one after another on one stream / one
  // OpenMP team, so their times add.
  for (const GemmCount& g : ops.gemms()) {
    const OpFamily f = g.shape.head ? OpFamily::head_gemm : OpFamily::layer_gemm;
    t.family_seconds[static_cast<size_t>(f)] += double(g.calls) * gemm_seconds(g.shape, dev);
  }
  for (int i = 0; i < kNumOpFamilies; ++i) {
    const auto f = static_cast<OpFamily>(i);
    const OpTotals& o = ops[f];
    t.engine_flops += double(o.flops);
    if (f == OpFamily::layer_gemm || f == OpFamily::head_gemm) {
      t.latency_seconds += double(o.calls) * dev.op_latency_s;  // inside gemm_seconds already
      continue;
    }
    double s = 0.0;
    if (f == OpFamily::attention_forward)
      s = double(o.flops) / at_least_tiny(dev.attention_forward_flops);
    else if (f == OpFamily::attention_backward)
      s = double(o.flops) / at_least_tiny(dev.attention_backward_flops);
    else
      s = double(o.bytes) / at_least_tiny(family_rate(dev, f));
    const double lat = double(o.calls) * dev.op_latency_s;
    t.latency_seconds += lat;
    t.family_seconds[static_cast<size_t>(i)] = s + lat;
  }
  for (const double s : t.family_seconds) t.compute_seconds += s;

  // Offload: prefetches and offloads overlap the compute (one layer ahead); a layer's worth
  // (the first prefetch, the last offload) never does.
  const double link = dev.gpu ? dev.host_link_bytes_per_s : dev.memory_bytes_per_s;
  t.offload_seconds =
      double(std::max(step.offloaded_bytes, step.prefetched_bytes)) / at_least_tiny(link);
  if (t.offload_seconds > 0.0)
    t.offload_exposed_seconds = std::max(t.offload_seconds - t.compute_seconds, 0.0) +
                                t.offload_seconds / double(std::max<int64_t>(shape.layers, 1));

  // Collectives: within a node (<= 8 GPUs) over the peer link, else the network.
  const int dp = shape.ranks / std::max(shape.context_parallel, 1);
  const auto link_for = [&](int r) {
    return r <= 8 || dev.network_bytes_per_s <= 0.0 ? dev.peer_link_bytes_per_s
                                                     : dev.network_bytes_per_s;
  };
  const double dp_s = collective_seconds(step.data_parallel_bytes, dp, link_for(shape.ranks));
  const double cp_s =
      collective_seconds(step.context_bytes, shape.context_parallel, link_for(shape.context_parallel));
  t.collective_seconds = dp_s + cp_s;
  // Gradient reduction runs per layer while the next layer's backward computes: the part beyond
  // the backward shows, and the last layer's. Context parallel's K/V exchange sits between a
  // layer's phases: all of it shows.
  const double backward = t.compute_seconds * 2.0 / 3.0;
  t.collective_exposed_seconds =
      cp_s + (dp_s > 0.0 ? std::max(dp_s - backward, 0.0) +
                               dp_s / double(std::max<int64_t>(shape.layers, 1))
                         : 0.0);

  // AdamW: read param, grad, m, v; write param, m, v (fp32: 28 bytes a parameter).
  if (shape.optimizer_params > 0) {
    const double p = double(shape.optimizer_params);
    if (shape.optimizer_on_host && dev.gpu)
      t.optimizer_seconds = 28.0 * p / at_least_tiny(dev.host_memory_bytes_per_s) +
                            p * double(dtype_size(shape.param_dtype)) / at_least_tiny(link);
    else
      t.optimizer_seconds = 28.0 * p / at_least_tiny(dev.memory_bytes_per_s);
  }

  t.seconds = t.compute_seconds + t.offload_exposed_seconds + t.collective_exposed_seconds +
              t.optimizer_seconds;
  const int cp = std::max(shape.context_parallel, 1);
  if (t.seconds > 0.0) {
    t.tokens_per_s_per_device = double(shape.tokens) / (t.seconds * double(cp));
    const double denom = t.seconds * double(cp) * at_least_tiny(dev.peak_flops);
    t.mfu_raw = shape.model_flops_raw / denom;
    t.mfu_causal = shape.model_flops_causal / denom;
  }
  double best = -1.0;
  for (int i = 0; i < kNumOpFamilies; ++i) {
    if (t.family_seconds[static_cast<size_t>(i)] > best) {
      best = t.family_seconds[static_cast<size_t>(i)];
      t.dominant = op_family_name(static_cast<OpFamily>(i));
    }
  }
  if (t.offload_exposed_seconds > best) {
    best = t.offload_exposed_seconds;
    t.dominant = "offload (exposed)";
  }
  if (t.collective_exposed_seconds > best) t.dominant = "collectives (exposed)";
  return t;
}

}  // namespace sbp
