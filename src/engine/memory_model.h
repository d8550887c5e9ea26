#pragma once
// The analytic memory of a stream-mode step (DESIGN §2), term by term, to check the ledger
// against: it is written from the algorithm, not from the allocations the engine makes.
#include <cstdint>
#include <map>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace sbp {

struct StreamMemoryTerms {
  int64_t checkpoints = 0;        // (L+1) T d      layer inputs + final hidden, act dtype
  int64_t grad_buffer = 0;        // T d            fp32 running activation gradient
  int64_t kv = 0;                 // 2 T G h        act dtype (sliding layers: their frame's rows,
  int64_t dkv = 0;                // 2 T G h        fp32       window_frame_rows, when fewer than T)
  int64_t chunk_working_set = 0;  // c (3d + 3Hh + 2F) act + c (H + 3F) fp32 (see .cpp)
  int64_t head_chunk = 0;         // c_h V act logits + c_h d (act + fp32) + 3 c_h fp32
  int64_t step_tables = 0;        // 4 T int32 index arrays + rope table
  // The layer phase (K/V + dK/dV + chunk) and the head phase never overlap.
  int64_t activation_peak() const;
};

StreamMemoryTerms stream_memory_terms(const ModelConfig& cfg, int64_t T, int64_t layer_chunk,
                                      int64_t head_chunk, DType act);

}  // namespace sbp
