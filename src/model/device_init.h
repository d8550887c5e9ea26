#pragma once
// Random weights drawn where they live: init_parameters' distribution (parameters.h) from the
// backend's counter-based normal numbers (Backend::fill_normal, core/counter_normal.h), one
// stream per tensor keyed by its name. On a GPU the 8B model's weights take a fraction of a
// second instead of the ~45 s of init_parameters (one host thread, then uploads); every backend
// gives the same values. Not init_parameters' values (another generator): only `bench`'s random
// models use it, never a fixture, checkpoint or test whose numbers are pinned.
#include <cstdint>

#include "backend/backend.h"
#include "model/parameters.h"

namespace sbp {

// As init_parameters(params, seed, style, std): matrices and embeddings mean 0, `std`; norms
// the identity (offset + w = 1; `test`: + 0.2 N); biases 0 (`test`: 0.1 N); with `hf` the
// embedding's padding row zero. Tensors of any float dtype (a BF16 one holds the fp32 value
// rounded once).
void init_parameters_on_backend(Backend& be, ParameterSet& params, uint64_t seed, InitStyle style,
                                float std = 0.02f);

// The stream of a tensor name (FNV-1a, as core/rng.h keys its streams).
uint64_t parameter_stream(const std::string& name);

}  // namespace sbp
