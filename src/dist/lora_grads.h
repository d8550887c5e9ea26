#pragma once
// The LoRA adapters' gradients summed over ranks (docs/DISTRIBUTED.md "LoRA and online
// objectives on several ranks"). Adapters are small (r·(in + out) per targeted projection), so
// every rank keeps them whole and replicated, as ZeRO-0 keeps full weights: each rank adds its
// micro-batches' gradients locally, then ONE all-reduce of all adapter gradients packed into one
// fp32 buffer per step. Every rank then holds the same summed gradients, clips by the same norm
// and runs the same AdamW update, so the adapters stay identical on every rank.
//
// Nothing is reduced per layer: the engine's gradient hook is not used for adapters (their
// gradients of a whole step are a few megabytes at most; one collective per step costs less
// than one per layer).
#include <cstdint>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/lora.h"

namespace sbp {

// grads := the sum over ranks of every rank's grads. A collective: every rank calls it once per
// step, after its last micro-batch slot. Returns the bytes reduced (0 with one rank).
int64_t allreduce_lora_grads(Communicator& comm, const LoraSet& grads);

}  // namespace sbp
