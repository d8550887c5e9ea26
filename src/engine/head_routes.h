#pragma once
// The engine's side of the head routes (objective/head_route.h): one function per route, each
// in its own file (head_route_*.cpp), and what they share. Engine::head_backward builds a
// HeadPass and runs the objective's route; nothing else chooses how the head runs.
//
// Every route computes the head over this rank's rows in blocks of the head chunk, has the
// objective's gradients written (by the host or by the backend), and runs each block's backward
// into gy; its completion sees the pass's values with one read of the device, at once or, given
// `later`, at the step's end (deferred_reads.h).
#include <cstdint>
#include <functional>

#include "backend/backend.h"
#include "core/communicator.h"
#include "core/pool.h"
#include "engine/context_slice.h"
#include "engine/deferred_reads.h"
#include "engine/head_block.h"
#include "engine/prepared_batch.h"
#include "engine/residual_grad.h"
#include "model/config.h"
#include "model/parameters.h"
#include "objective/objective.h"

namespace sbp {

// One pass of the head over a micro-batch, as the routes need it.
struct HeadPass {
  const ModelConfig& cfg;
  Backend& be;
  Pool& pool;
  const ModelTensors& W;  // the model's weights
  DType act;
  const PreparedBatch& step;
  const Tensor& hidden;  // (Tl, d) this rank's final hidden rows (local rows)
  const ContextSlice& cs;
  int64_t hc;             // rows of a head block
  Communicator* group;    // the context group, or null
  const ModelTensors& G;  // gradients: the head's ADD into them
  ResidualGrad& gy;       // (Tl, d) dL/d(hidden) out
  DeferredReads* later;
  Objective& objective;

  // The block of rows [s, e) of piece p (hidden's local rows, the batch's global rows), its
  // forward run; to_host false: its numbers stay on the device.
  HeadBlock block(const RowPiece& p, int64_t s, int64_t e, bool entropy, bool to_host) const;
  // Block b's backward (rows [s, e) of piece p) from the gradients it holds, into G and gy.
  void backward(HeadBlock& b, const RowPiece& p, int64_t s, int64_t e) const;
  // The pass's one read of `rows` (now, or given `later` at the step's end), then `show` of each
  // of this rank's pieces in row order, then the group's sum of Objective::pass_sums(). Nothing
  // is shown by a backend that does not compute.
  void complete(HeadPassRows& rows, std::function<void(const TokenChunk& piece)> show) const;
};

void run_head_route(const HeadPass& pass, const HostChunks& route);     // head_route_host.cpp
void run_head_route(const HeadPass& pass, const ConstantGrads& route);  // head_route_constant.cpp
void run_head_route(const HeadPass& pass, const PolicyFormula& route);  // head_route_formula.cpp
void run_head_route(const HeadPass& pass, const ValueFormula& route);   // head_route_formula.cpp
void run_head_route(const HeadPass& pass, const SequenceRoute& route);  // head_route_sequence.cpp

}  // namespace sbp
