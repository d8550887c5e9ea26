#pragma once
// What ranks compare of the weights they will load (issue 54): every tensor's bytes, not only
// the safetensors header. Ranks whose model files have the same shapes but other weights (a
// stale copy on one machine, another seed, another fine-tune) used to agree on the header and
// train a model that is no one's. Each tensor is hashed (XXH64, one linear pass over the file's
// data at memory speed, tensors in parallel), so that a disagreement names the first tensor that
// differs: "ranks disagree on model/model.safetensors: lm_head.weight (rank 0: ..., rank 1: ...)".
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/rank_agreement.h"

namespace sbp {

// XXH64 of `n` bytes (libxxhash's, inlined).
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);

// One entry per tensor of the safetensors file `path`, in the file's order: key
// "<key>: <tensor name>", value "<dtype> <shape> xxh64 <hex>". A file that is not valid
// safetensors (or cannot be read) gives one entry "<key>: (tensors)" saying so: the run's loader
// reports the problem itself when every rank has it.
void append_tensor_digests(std::vector<AgreedSetting>& out, const std::string& key,
                           const std::string& path);

}  // namespace sbp
