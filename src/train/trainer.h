#pragma once
// `streambp train CONFIG.yaml`: the training loop (docs/TRAINING.md).
//
// One optimizer step = `grad_accum` packed micro-batches of the current epoch (fewer at an
// epoch's end; a step never spans two epochs). The SFT loss of a step is normalised by the number
// of loss tokens of ALL its micro-batches, counted before the first backward, so accumulation
// equals one big batch. Epochs visit the examples in an order drawn from a seeded RNG; the RNG
// state at the start of the epoch and the number of micro-batches done are the data cursor a
// checkpoint stores, so a resumed run replays the same order and continues bit-exactly.
#include <string>

#include "dist/communicator.h"
#include "train/train_config.h"

namespace sbp {

// Runs the configured training (or the built-in demo for a `demo:` config). `resume` is a
// checkpoint directory or an output directory ("" for a fresh run). Returns the exit code:
// 0 when done, kInterruptedExitCode (130) after SIGINT/SIGTERM with a checkpoint saved.
// Bad input throws InputError.
int run_training(const TrainConfig& cfg, const std::string& resume);

// The same as one rank of a data-parallel run over `comm` (docs/DISTRIBUTED.md): every rank
// calls it with the same config; rank i of N trains on micro-batches i, i+N, ... of each step
// (ranks x grad_accum of them); only rank 0 prints and writes metrics and checkpoints (every
// rank its optimizer shards under dist.zero 1/2). With one rank it is the call above.
int run_training(const TrainConfig& cfg, const std::string& resume, Communicator& comm);

}  // namespace sbp
