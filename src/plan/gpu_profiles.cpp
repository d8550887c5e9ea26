#include "plan/gpu_profiles.h"

#include "core/error.h"

namespace sbp {

namespace {

constexpr double kT = 1e12, kG = 1e9;

// Assumptions shared by every card until gpu-check measures them (docs/BENCHMARKS.md):
// - GEMM efficiency: docs/CUDA.md's step estimates assume bf16 GEMMs at ~600 TFLOP/s on an
//   H100/H200 (0.61 of 989); the older and consumer cards get 0.7 (cuBLAS on large GEMMs).
// - Memory-bound kernels reach 0.8 of the datasheet bandwidth; links 0.8 of theirs per
//   direction (PCIe: pinned copies; NVLink: NCCL's bus bandwidth).
// - Our attention (attention_tc.cu: split TF32 on tensor cores) at 75 TFLOP/s on an H100/H200,
//   the middle of docs/CUDA.md's 50-100 estimate, forward and backward alike; other cards
//   scaled by their dense TF32 tensor peak against the H100's 494.7.
// - 5 us per op: a launch plus the engine's host-side bookkeeping (no CUDA graphs).
// - Host memory for the optimizer on the host: 100 GB/s for one GPU's share of a server.
constexpr double kMemEff = 0.8, kLinkEff = 0.8;
constexpr double kH100Attention = 75 * kT, kH100Tf32 = 494.7 * kT;

DeviceProfile base(const char* name, const char* source, double bf16, double fp32, double tf32,
                   double gemm_eff, double hbm, double pcie_dir, double nvlink_dir, double ib,
                   double mem_gb) {
  DeviceProfile p;
  p.name = name;
  p.source = source;
  p.gpu = true;
  p.peak_flops = bf16;
  p.fp32_flops = fp32;
  p.gemm_efficiency = gemm_eff;
  p.attention_forward_flops = p.attention_backward_flops = kH100Attention * tf32 / kH100Tf32;
  p.memory_bytes_per_s = kMemEff * hbm;
  p.op_latency_s = 5e-6;
  p.host_link_bytes_per_s = kLinkEff * pcie_dir;
  p.peer_link_bytes_per_s = kLinkEff * (nvlink_dir > 0 ? nvlink_dir : pcie_dir);
  p.network_bytes_per_s = kLinkEff * ib;
  p.host_memory_bytes_per_s = 100 * kG;
  p.memory_bytes = static_cast<int64_t>(mem_gb * 1e9);
  return p;
}

}  // namespace

std::vector<std::string> gpu_profile_names() { return {"h100", "h200", "a100", "rtx4090"}; }

DeviceProfile gpu_profile(const std::string& name) {
  // NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 989.4 TFLOPS dense (1,979 with
  // sparsity), FP32 67, TF32 494.7 dense; HBM3 3.35 TB/s, 80 GB; NVLink 900 GB/s (both
  // directions: 450 each); PCIe Gen5 128 GB/s (64 each). InfiniBand NDR 400 Gb/s per GPU
  // (50 GB/s; DGX H100: one ConnectX-7 per GPU).
  if (name == "h100")
    return base("H100 SXM 80GB", "NVIDIA H100 datasheet (SXM5); efficiencies assumed, unmeasured",
                989.4 * kT, 67 * kT, 494.7 * kT, 0.61, 3350 * kG, 64 * kG, 450 * kG, 50 * kG, 80);
  // NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100's compute (BF16 989 TFLOPS dense,
  // FP32 67, TF32 494 dense), HBM3e 4.8 TB/s, 141 GB; NVLink 900 GB/s; PCIe Gen5 128 GB/s.
  if (name == "h200")
    return base("H200 SXM 141GB", "NVIDIA H200 datasheet (SXM); efficiencies assumed, unmeasured",
                989 * kT, 67 * kT, 494 * kT, 0.61, 4800 * kG, 64 * kG, 450 * kG, 50 * kG, 141);
  // NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB): BF16 312 TFLOPS dense (624 sparse),
  // FP32 19.5, TF32 156 dense; HBM2e 2,039 GB/s; NVLink 600 GB/s (300 each way); PCIe Gen4
  // 64 GB/s (32 each). InfiniBand HDR 200 Gb/s per GPU (25 GB/s; DGX A100).
  if (name == "a100")
    return base("A100 SXM 80GB", "NVIDIA A100 datasheet (SXM4 80GB); efficiencies assumed, unmeasured",
                312 * kT, 19.5 * kT, 156 * kT, 0.7, 2039 * kG, 32 * kG, 300 * kG, 25 * kG, 80);
  // NVIDIA Ada Lovelace GPU architecture whitepaper, appendix A (GeForce RTX 4090): FP16/BF16
  // tensor with FP32 accumulate 165.2 TFLOPS dense (330.4 sparse), FP32 82.6, TF32 tensor
  // 82.6 dense; GDDR6X 1,008 GB/s, 24 GB; PCIe Gen4 x16 (32 GB/s each way); no NVLink (peers
  // over PCIe); no InfiniBand (network 0: a single machine).
  if (name == "rtx4090")
    return base("GeForce RTX 4090 24GB",
                "NVIDIA Ada Lovelace whitepaper (RTX 4090); efficiencies assumed, unmeasured",
                165.2 * kT, 82.6 * kT, 82.6 * kT, 0.7, 1008 * kG, 32 * kG, 0, 0, 24);
  throw InputError("unknown device '" + name + "' (known: cpu, h100, h200, a100, rtx4090)");
}

}  // namespace sbp
