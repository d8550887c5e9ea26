#include "backend/op_profile.h"

namespace sbp {

double OpProfile::seconds() const {
  double s = 0.0;
  for (const OpTotals& t : totals_) s += t.seconds;
  return s;
}

void OpProfile::record(OpFamily f, double seconds, int64_t flops, int64_t bytes) {
  if (f == OpFamily::layer_gemm && region_ == OpRegion::head) f = OpFamily::head_gemm;
  OpTotals& t = totals_[static_cast<size_t>(f)];
  t.calls += 1;
  t.seconds += seconds;
  t.flops += flops;
  t.bytes += bytes;
}

double GemmShape::bytes() const {
  const double m = double(M), n = double(N), k = double(K);
  return m * k * double(dtype_size(a)) + k * n * double(dtype_size(b)) +
         m * n * double(dtype_size(c)) * (accumulate ? 2.0 : 1.0);
}

void OpProfile::record_gemm(GemmShape shape) {
  shape.head = region_ == OpRegion::head;
  // A linear search: a step has a few dozen shapes, and a record is far cheaper than the GEMM.
  for (GemmCount& g : gemms_) {
    if (g.shape == shape) {
      g.calls += 1;
      return;
    }
  }
  gemms_.push_back(GemmCount{shape, 1});
}

const char* op_family_name(OpFamily f) {
  switch (f) {
    case OpFamily::layer_gemm: return "layer gemm";
    case OpFamily::head_gemm: return "LM-head gemm";
    case OpFamily::attention_forward: return "attention fwd";
    case OpFamily::attention_backward: return "attention bwd";
    case OpFamily::norm: return "rmsnorm";
    case OpFamily::rope: return "rope";
    case OpFamily::glu: return "swiglu/geglu";
    case OpFamily::elementwise: return "elementwise";
    case OpFamily::head_softmax: return "LM-head softmax/CE/dlogits";
    case OpFamily::embedding: return "embedding";
    case OpFamily::optimizer: return "optimizer";
    case OpFamily::copy: return "copy/convert/fill";
  }
  return "?";
}

bool op_family_counts_flops(OpFamily f) {
  return f == OpFamily::layer_gemm || f == OpFamily::head_gemm ||
         f == OpFamily::attention_forward || f == OpFamily::attention_backward;
}

}  // namespace sbp
