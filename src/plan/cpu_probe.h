#pragma once
// The CPU's device profile for the time planner (plan/time_model.h), measured on the spot by
// short probes on this machine's CPU backend, as `bench` measures sgemm: the step's own GEMM
// shapes (the largest by FLOPs, each at most ~2 GFLOP: a larger one is probed at a size cut
// down to that and priced at the rate it reached), the attention kernel at the step's head
// dims, each memory-bound family at a chunk's size, and one op's fixed cost. A second or a few
// in all; the probes' bytes and FLOPs are counted exactly as the planned step's are
// (backend/op_profile.h), so the rates and the accounting agree on what a byte is.
#include "backend/backend.h"
#include "backend/op_profile.h"
#include "model/config.h"
#include "plan/time_model.h"

namespace sbp {

struct CpuProbeShape {
  DType act_dtype = DType::F32;  // activations, K/V, head blocks
  int64_t rows = 512;            // a layer chunk's rows (the memory-bound probes' size)
  int64_t head_rows = 512;       // a head block's rows
  int64_t keys = 2048;           // the attention probe's keys (the step's T, capped)
};

// Probes the shapes `ops` recorded (a planned step's) and the families of `cfg`'s layers.
DeviceProfile probe_cpu_profile(const OpProfile& ops, const ModelConfig& cfg,
                                const CpuProbeShape& shape);

// Mean seconds of one call of GEMM `g` on `be` (a computing backend), over at least 30 ms;
// above ~2 GFLOP it is timed cut down and scaled by the FLOPs. Its operands live in a pool of
// its own for the call. `bench --predict cpu` re-times the step's largest shape beside every
// measured step, so that a prediction follows the share of a shared machine the step got.
double time_gemm(Backend& be, const GemmShape& g);
// The shape of `ops` with the most FLOPs over its calls (a default shape when there is none).
GemmShape largest_gemm(const OpProfile& ops);

}  // namespace sbp
