#pragma once
// Context parallelism's split of one micro-batch's rows among the C ranks of a context group
// (docs/DISTRIBUTED.md "Context parallelism"). The T rows of the packed stream are cut into 2C
// pieces of near-equal size; rank r owns pieces r and 2C-1-r. A causal query row attends to as
// many keys as its position, so the attention work of a piece grows along the sequence; pairing
// the i-th earliest piece with the i-th latest gives every rank nearly the same work (the
// balance test measures it, attention_work below).
//
// A rank keeps its rows' hidden states, layer checkpoints, residual-stream gradients and head
// blocks in LOCAL rows: its pieces one after the other, in row order (RowPiece::local). K/V and
// dK/dV stay in GLOBAL rows (T, G*h), as attention addresses them.
//
// One rank alone (C = 1) owns a single piece [0, T): the ordinary step.
#include <cstdint>
#include <span>
#include <vector>

namespace sbp {

struct RowPiece {
  int64_t begin = 0, end = 0;  // global rows [begin, end)
  int64_t local = 0;           // where the piece starts in its owner's local rows
  int owner = 0;               // the rank that owns it
  int64_t size() const { return end - begin; }
};

class ContextSlice {
 public:
  // Rank `rank` of `ranks` (>= 1) over a T-row stream (T >= 0; pieces may be empty when T < 2C).
  ContextSlice(int64_t T, int ranks, int rank);

  int64_t T() const { return T_; }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  bool split() const { return ranks_ > 1; }
  // Every piece, in row order (one piece [0, T) when ranks == 1).
  std::span<const RowPiece> pieces() const { return pieces_; }
  // This rank's pieces, in row order.
  std::span<const RowPiece> mine() const { return mine_; }
  // Rows this rank (or rank r) owns.
  int64_t local_rows() const { return local_rows(rank_); }
  int64_t local_rows(int r) const;

 private:
  int64_t T_;
  int ranks_, rank_;
  std::vector<RowPiece> pieces_;
  std::vector<RowPiece> mine_;
};

// The rank of a context group of `ranks` that owns the most of T rows (the lowest of a tie):
// the one whose memory a plan of a context-parallel step reports.
int busiest_rank(int64_t T, int ranks);

// Per rank: the attention work of its rows, counted as query-key pairs of causal attention
// within each row's segment (seq_lens: the packed segments' lengths, summing to T) and, when
// window > 0, within the window. The FLOPs of the attention forward and backward are
// proportional to it. Closed form per piece and segment: O(pieces x segments), not O(T).
std::vector<int64_t> attention_work(const ContextSlice& slice, std::span<const int64_t> seq_lens,
                                    int64_t window = 0);

}  // namespace sbp
