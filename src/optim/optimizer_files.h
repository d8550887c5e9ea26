#pragma once
// AdamW state on disk, in one file or in one file per rank (docs/DISTRIBUTED.md):
//
//   optimizer.safetensors                   every moment whole: "m.<name>", "v.<name>" in the
//                                           parameter's shape (all m, then all v); metadata
//                                           {"step": N}, N the optimizer's step count
//   optimizer-rank<r>-of-<R>.safetensors    rank r's slice (shard_range.h) of every moment, 1-D;
//                                           metadata {"step", "rank", "ranks"}; a tensor whose
//                                           slice is empty is left out
//
// Reading fills any layout from either form: each slice is assembled from the saved pieces that
// overlap it, so a run resumes on another number of ranks, or on one process, from the same
// files, and a single-process checkpoint resumes sharded.
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "optim/adamw.h"
#include "optim/shard_range.h"
#include "optim/sharded_adamw.h"

namespace sbp {

// The moments of one parameter, or of one slice of it, as an optimizer holds them.
struct MomentSlice {
  std::string name;   // the parameter's Hugging Face name
  int64_t numel = 0;  // of the whole parameter
  ShardRange range;   // the flattened elements held
  Tensor m, v;        // range.count F32 elements each (any shape)
};
std::vector<MomentSlice> moment_slices(const AdamW& opt);         // whole tensors
std::vector<MomentSlice> moment_slices(const ShardedAdamW& opt);  // this rank's slices

inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
// "optimizer-rank00001-of-00004.safetensors"
std::string optimizer_shard_file(int rank, int ranks);

// optimizer.safetensors in `dir` from whole-tensor slices.
void write_optimizer_file(const std::string& dir, const std::vector<MomentSlice>& whole,
                          int64_t steps);
// optimizer-rank<r>-of-<R>.safetensors in `dir` from rank r's slices.
void write_optimizer_shard(const std::string& dir, const std::vector<MomentSlice>& mine,
                           int64_t steps, int rank, int ranks);

// Fills `into` from dir's optimizer state in whichever form it was saved; returns the step
// count. InputError naming the file (and tensor) when it is missing, incomplete or inconsistent.
int64_t read_optimizer_state(const std::string& dir, const std::vector<MomentSlice>& into);

}  // namespace sbp
