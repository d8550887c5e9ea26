#pragma once
// The time of a training step, predicted from the shape-only step (plan_step.h with
// StepMemoryOptions::ops): every op's FLOPs and bytes by family and every GEMM's shape, priced
// against a device profile. The CPU's profile is measured on the spot by short probes of the
// step's own shapes (plan/cpu_probe.h); a GPU's comes from its datasheet and an efficiency per
// op family (plan/gpu_profiles.h), each number with its source.
//
// What is priced (docs/BENCHMARKS.md "Time planner"):
//   GEMMs      per shape: the CPU's probed seconds for that shape; a GPU's roofline,
//              max(FLOPs / (peak x efficiency x passes), bytes / bandwidth), where an operand in
//              F32 costs 3 bf16 tensor-core passes (split3) and F32 x F32 runs on CUDA cores
//              (docs/CUDA.md, the GEMM table);
//   attention  FLOPs / the attention kernel's achieved rate (forward and backward apart);
//   the rest   bytes / the family's achieved bandwidth;
//   every op   plus one op latency (a launch on a GPU, an OpenMP region on the CPU);
//   offload    bytes queued to and from the host space over the host link, overlapped with the
//              compute (the engine prefetches one layer ahead): only what exceeds it shows;
//   collectives the planned rank's bytes (plan/counting_communicator.h) over the peer link
//              (<= 8 ranks) or the network: data parallel's gradient reduction overlapped with
//              the backward (per layer), context parallel's K/V and dK/dV not overlapped;
//   optimizer  (adamw) on the device: 28 bytes a parameter over the memory; on the host
//              (offload optimizer): over the host's memory, plus the weights' upload.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/op_profile.h"
#include "model/config.h"
#include "plan/plan_step.h"

namespace sbp {

// One GEMM shape's measured time (the CPU's probes).
struct MeasuredGemm {
  GemmShape shape;
  double seconds = 0.0;  // one call
};

struct DeviceProfile {
  std::string name;    // "H100 SXM (80 GB)", "cpu: AMD EPYC ..., 2 threads"
  std::string source;  // where the numbers come from, in a line
  bool gpu = false;
  bool measured = false;  // true: every rate below was measured on this machine
  // The MFU yardstick: a GPU's dense bf16 tensor-core peak (datasheet), the CPU's measured
  // sgemm rate (2048^3), in FLOP/s.
  double peak_flops = 0.0;
  // GPU: dense fp32 peak on CUDA cores (an F32 x F32 GEMM) and the fraction of peak a large
  // GEMM reaches (cuBLASLt); the CPU uses gemm_table instead.
  double fp32_flops = 0.0;
  double gemm_efficiency = 1.0;
  // CPU: seconds per call of the probed shapes; a shape not probed gets the rate (FLOP/s) of
  // the probed ones together (gemm_fallback_flops).
  std::vector<MeasuredGemm> gemm_table;
  double gemm_fallback_flops = 0.0;
  double attention_forward_flops = 0.0;   // achieved by the attention kernel, FLOP/s
  double attention_backward_flops = 0.0;
  // Achieved bandwidth of the memory-bound families, bytes/s as op_profile counts bytes;
  // a family at 0 uses memory_bytes_per_s.
  double memory_bytes_per_s = 0.0;
  std::array<double, kNumOpFamilies> family_bytes_per_s{};
  double op_latency_s = 0.0;  // added to every op
  double host_link_bytes_per_s = 0.0;    // device <-> host, one direction (PCIe)
  double peer_link_bytes_per_s = 0.0;    // GPU <-> GPU in a node, one direction (NVLink)
  double network_bytes_per_s = 0.0;      // across nodes, per GPU (InfiniBand)
  double host_memory_bytes_per_s = 0.0;  // the host's memory (optimizer on the host)
  int64_t memory_bytes = 0;              // device memory (the plan's budget when none is given)
};

// What the prediction needs besides the ops: the step's shape and what MFU divides by.
struct StepShape {
  int64_t tokens = 0;  // tokens of one micro-batch (the context group's, with --cp)
  int ranks = 1;
  int context_parallel = 1;
  // The model's training FLOPs of the micro-batch (model_flops below), two conventions.
  double model_flops_raw = 0.0;
  double model_flops_causal = 0.0;
  // adamw after the step: parameters the planned rank updates (its shard), and where.
  int64_t optimizer_params = 0;
  bool optimizer_on_host = false;
  DType param_dtype = DType::BF16;
  int64_t layers = 1;  // the overlap's granularity (offload, gradient reduction)
};

struct StepTime {
  double seconds = 0.0;  // the step, as predicted
  double compute_seconds = 0.0;  // every op of the step, in order (no overlap between ops)
  std::array<double, kNumOpFamilies> family_seconds{};  // op latency included
  double latency_seconds = 0.0;  // of which: op latencies
  double offload_seconds = 0.0, offload_exposed_seconds = 0.0;
  double collective_seconds = 0.0, collective_exposed_seconds = 0.0;
  double optimizer_seconds = 0.0;  // adamw after the step (device or host)
  double tokens_per_s_per_device = 0.0;
  // Model FLOPs per second per device over the peak: raw counts every (query, key) pair of a
  // sequence (PaLM's 6N + 12 L H h T per token), causal counts the pairs causal attention
  // computes (half: 6N + 6 L H h T), the convention of TRL's and torchtitan's long-context
  // figures.
  double mfu_raw = 0.0, mfu_causal = 0.0;
  double engine_flops = 0.0;  // what the step computes (recomputation included)
  std::string dominant;       // the largest part: a family, "offload" or "collectives"
};

// Model FLOPs of a training step (forward + backward = 3 forwards) over sequences `seq_lens`
// of the trained model: 6 x the matmul parameters (projections of every layer and the LM
// head; not the embedding lookup) per token, plus attention: 12 L H h n^2 per sequence of n
// tokens (raw) or 12 L H h n(n+1)/2 (causal; windowed layers: the pairs of their window).
struct ModelFlops {
  double raw = 0.0, causal = 0.0;
};
ModelFlops model_flops(const ModelConfig& cfg, const std::vector<int64_t>& seq_lens);
// The matmul parameters model_flops counts: L (d (H h + 2 G h) + H h d + 3 d F) + V d.
double matmul_parameters(const ModelConfig& cfg);

// Seconds of one GEMM call on `dev` (the CPU: its table or fallback rate; a GPU: the roofline).
double gemm_seconds(const GemmShape& g, const DeviceProfile& dev);

StepTime predict_step_time(const OpProfile& ops, const PlannedStep& step,
                           const DeviceProfile& dev, const StepShape& shape);

}  // namespace sbp
