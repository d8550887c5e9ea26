#pragma once
// The interface the streamed LM head drives (DESIGN §2 "Objectives"): per-token target
// log-probabilities in, per-token dL/dlogp out, one head chunk at a time, rows in order.
#include <cstdint>
#include <span>

namespace sbp {

class Objective {
 public:
  virtual ~Objective() = default;
  // Rows [row_begin, row_begin + n) of the packed batch: logp (n) of each row's target (0 where
  // the row has no target); writes dlogp (n) = dL/dlogp for those rows.
  virtual void token_grads(int64_t row_begin, std::span<const float> logp,
                           std::span<float> dlogp) = 0;
};

}  // namespace sbp
