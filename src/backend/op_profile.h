#pragma once
// OpProfile: where a step's time goes, by kernel family (`streambp bench --profile`).
//
// The caller owns one and attaches it to a Backend (Backend::set_profile); every public op of
// that backend then times its implementation and adds seconds, FLOPs (gemm and attention: the
// kernels' own count) and estimated bytes moved (the tensors the op reads and writes, each
// once) to the op's family. Nothing is global: two backends, two profiles. With no profile
// attached an op pays one pointer test.
//
// Times are host wall-clock around the implementation call, so they are only meaningful for a
// backend whose ops finish before they return (the CPU's). An op that calls another public op
// from inside its implementation is counted once, as the outer op.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace sbp {

enum class OpFamily : int {
  layer_gemm,  // gemm outside OpRegion::head: the decoder layers (LoRA included)
  head_gemm,   // gemm inside it: the LM head's logits, dhf and dW (or the value head's)
  attention_forward,
  attention_backward,
  norm,          // rmsnorm forward/backward
  rope,          // rope forward/backward/table
  glu,           // swiglu, geglu forward/backward
  elementwise,   // add_inplace, scale_inplace, add_bias, bias_backward, sum_squares
  head_softmax,  // logsoftmax_target, dlogits, entropy, argmax, logit soft-capping
  embedding,
  optimizer,  // adamw_step
  copy,       // copy (F32 <-> BF16 conversions included) and fill
};
inline constexpr int kNumOpFamilies = 12;

// Which part of the step the ops issued now belong to; tells the head's GEMMs from the layers'.
enum class OpRegion { layers, head };

// One GEMM's shape as the time planner needs it (plan/time_model.h): C (M, N) = A (M, K) B (K, N)
// after the transposes, the operands' storage dtypes (a device may run an F32 operand as several
// bf16 calls, docs/CUDA.md) and whether C is read too (beta != 0).
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  DType a = DType::F32, b = DType::F32, c = DType::F32;
  bool trans_a = false, trans_b = false;  // as the call gave them (the BLAS's layouts differ)
  bool head = false;        // issued inside OpRegion::head
  bool accumulate = false;  // beta != 0
  bool operator==(const GemmShape&) const = default;
  double flops() const { return 2.0 * double(M) * double(N) * double(K); }
  // Bytes of A, B and C (C twice when accumulated), each once.
  double bytes() const;
};
struct GemmCount {
  GemmShape shape;
  int64_t calls = 0;
};

struct OpTotals {
  int64_t calls = 0;
  double seconds = 0.0;
  int64_t flops = 0;  // counted by the kernels (gemm, attention); 0 elsewhere
  int64_t bytes = 0;  // estimated: every tensor the op reads and every tensor it writes, once
};

class OpProfile {
 public:
  const OpTotals& operator[](OpFamily f) const { return totals_[static_cast<size_t>(f)]; }
  // Sum of every family's seconds: at most the wall time of the ops' caller.
  double seconds() const;
  void reset() {
    totals_ = {};
    gemms_.clear();
  }
  // Every distinct GEMM shape of the recorded ops with its number of calls, in first-call order.
  // A step has a few dozen (projections x passes x full and tail chunks), whatever its T.
  const std::vector<GemmCount>& gemms() const { return gemms_; }

  // The Backend's side: one timed op. A layer GEMM issued inside OpRegion::head is a head GEMM.
  void record(OpFamily f, double seconds, int64_t flops, int64_t bytes);
  OpRegion region() const { return region_; }
  void set_region(OpRegion r) { region_ = r; }
  // The Backend's side, after record() of the same GEMM (its `head` is set from the region).
  void record_gemm(GemmShape shape);

 private:
  std::array<OpTotals, kNumOpFamilies> totals_{};
  std::vector<GemmCount> gemms_;
  OpRegion region_ = OpRegion::layers;
};

// "layer gemm", "attention fwd", ...
const char* op_family_name(OpFamily f);
// True for the families whose yardstick is sgemm's GFLOP/s; the others are rated in GB/s
// against the machine's copy bandwidth.
bool op_family_counts_flops(OpFamily f);

// Marks the ops issued during its lifetime as belonging to `region` (restores the previous one
// after). A null profile (profiling off) makes it a no-op.
class ProfileRegion {
 public:
  ProfileRegion(OpProfile* p, OpRegion r) : p_(p) {
    if (p_) {
      prev_ = p_->region();
      p_->set_region(r);
    }
  }
  ~ProfileRegion() {
    if (p_) p_->set_region(prev_);
  }
  ProfileRegion(const ProfileRegion&) = delete;
  ProfileRegion& operator=(const ProfileRegion&) = delete;

 private:
  OpProfile* p_;
  OpRegion prev_ = OpRegion::layers;
};

}  // namespace sbp
