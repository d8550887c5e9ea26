#include "objective/objective.h"

#include <algorithm>

#include "core/error.h"

namespace sbp {

void Objective::chunk_grads(const TokenChunk& in, const TokenChunkGrads& out) {
  SBP_CHECK(head() == HeadKind::lm, "objective: a value-head objective must override chunk_grads");
  if (grads_without_logp()) {  // the same numbers as the engine's path without the values
    constant_grads(in.row_begin, out.dlogp);
    if (prepasses() == 0) add_logp(in.row_begin, in.logp);
  } else {
    token_grads(in.row_begin, in.logp, out.dlogp);
  }
  std::fill(out.dentropy.begin(), out.dentropy.end(), 0.0f);
}

void Objective::token_grads(int64_t, std::span<const float>, std::span<float>) {
  throw Error("objective: neither chunk_grads nor token_grads is implemented");
}

void Objective::constant_grads(int64_t, std::span<float>) {
  throw Error("objective: grads_without_logp() without constant_grads()");
}

void Objective::add_logp(int64_t, std::span<const float>) {
  throw Error("objective: grads_without_logp() without add_logp()");
}

}  // namespace sbp
