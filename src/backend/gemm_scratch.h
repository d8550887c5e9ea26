#pragma once
// The conversion scratch of one gemm call: what a GPU backend needs to run every product of a
// bf16 step on bf16 tensor cores (cuda/gemm.cu, cuda/gemm_plan.h), as a rule of the contract.
//
// Backend::gemm takes these bytes from the pool an engine lends it (Backend::ScratchLoan) for
// the call's duration, on EVERY backend, so the ledger records them under layer_workspace: a
// CPU step's ledger, the plan (meta backend) and a GPU step's then agree to the byte, and a
// budget means the same memory on each. The CPU backend computes without them (its mixed
// products widen bounded panels on the heap, cpu/gemm_bf16.cpp); the CUDA backend uses them.
//
// The rule, by dtypes only:
//  - A and B of different dtypes: the F32 one is split into kGemmSplitParts bf16 parts
//    (cuda/gemm_split.h), 2 bytes each per element, and the product runs as one bf16 GEMM per
//    part into C;
//  - a BF16 C that would otherwise be rounded more than once (several parts, or F32 operands,
//    whose cuBLASLt product cannot be written to BF16): an fp32 copy of C, 4 bytes per element,
//    accumulated there and rounded once.
// A and B both BF16 or both F32 need nothing else (F32 x F32 is the fp32 reference precision).
#include <cstdint>

#include "core/dtype.h"

namespace sbp {

// Parts of an fp32 operand beside a BF16 one: three keep all 24 bits (tools/bench/
// gemm_accuracy.cpp measured two and three against float64).
constexpr int kGemmSplitParts = 3;

// Each piece starts 256 bytes apart at least (cuBLASLt's preferred operand alignment).
constexpr int64_t kGemmScratchAlign = 256;
inline int64_t gemm_scratch_round(int64_t bytes) {
  return (bytes + kGemmScratchAlign - 1) / kGemmScratchAlign * kGemmScratchAlign;
}

struct GemmScratch {
  int64_t part_stride = 0;  // bytes from one bf16 part to the next (0: nothing split)
  int64_t c_bytes = 0;      // fp32 C (0: none), after the parts
  int64_t parts_bytes() const { return kGemmSplitParts * part_stride; }
  int64_t c_offset() const { return parts_bytes(); }
  int64_t total() const { return parts_bytes() + c_bytes; }
};

inline GemmScratch gemm_scratch(DType c, DType a, DType b, int64_t c_numel, int64_t a_numel,
                                int64_t b_numel) {
  GemmScratch s;
  const bool mixed = a != b;
  if (mixed) s.part_stride = gemm_scratch_round(2 * (a == DType::F32 ? a_numel : b_numel));
  if (c == DType::BF16 && (mixed || a == DType::F32)) s.c_bytes = 4 * c_numel;
  return s;
}

}  // namespace sbp
