#pragma once
// The trainer's batch source: the training examples packed into micro-batches, epoch after
// epoch, in an order drawn from a seeded RNG. The RNG state at the start of the epoch and the
// number of micro-batches done are the data cursor a checkpoint stores, so a resumed run
// replays the same order and continues bit-exactly.
//
// One optimizer step = ranks x grad_accum micro-batches of the current epoch (fewer at an
// epoch's end; a step never spans two epochs); micro-batch i of a step goes to rank
// i % ranks (step/micro_batch.h StepBatches).
#include <array>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/packing.h"
#include "dist/communicator.h"
#include "objective/objective_setup.h"
#include "step/micro_batch.h"

namespace sbp {

// A packed micro-batch as the step runner takes it: GRPO/PPO rewards per segment; GRPO's group
// size = the segments of the first example (every example has the same number).
MicroBatch to_micro_batch(PackedBatch p, ObjectiveKind kind);

// Examples packed once, in file order (held-out sets).
std::vector<MicroBatch> pack_in_order(const std::vector<Example>& examples, int64_t max_tokens,
                                      ObjectiveKind kind);

struct DataCursor {
  int64_t epoch = 0;                    // 0-based
  int64_t micro_batches_done = 0;       // of that epoch's packing plan
  std::array<uint64_t, 4> epoch_rng{};  // the data-order RNG's state at the start of `epoch`
};

class TrainBatches {
 public:
  // `examples` must outlive this object.
  TrainBatches(const std::vector<Example>& examples, int64_t max_tokens, bool shuffle,
               uint64_t seed, ObjectiveKind kind);

  // Optimizer steps of `per_step` micro-batches in `epochs` epochs. When every order packs into
  // the same number of micro-batches (no shuffle, or examples that all fit one micro-batch, or
  // no two of which fit together) one epoch is counted and multiplied; otherwise each epoch's
  // order is drawn and packed, and that work is bounded: more than kMaxPlannedExamples example
  // placements is an InputError naming `where` (the `epochs` key) that asks for max_steps.
  int64_t steps_in_epochs(int64_t epochs, int64_t per_step, const std::string& where) const;

  // A fresh run starts at epoch 0; a resumed one at the checkpoint's cursor. InputError (naming
  // `where`) when the cursor is past its epoch, or when its RNG state is not the one the seed
  // gives at the start of its epoch (checked when that costs at most kMaxRngAdvance draws).
  void start();
  void resume(const DataCursor& cursor, const std::string& where);

  // This rank's part of the next step of `per_step` micro-batches; starts the next epoch when
  // the current one is done. Advances the cursor.
  StepBatches next(int64_t per_step, const Communicator& comm);

  const DataCursor& cursor() const { return cursor_; }
  // Epochs done, with the fraction of the current one (for the metrics).
  double epoch_progress() const;

  // Example placements (epochs x examples) steps_in_epochs may simulate: about a second.
  static constexpr int64_t kMaxPlannedExamples = int64_t{1} << 25;
  // RNG draws resume() may replay to check a cursor's RNG state: a few seconds at most.
  static constexpr int64_t kMaxRngAdvance = int64_t{1} << 32;

 private:
  bool packing_is_order_independent() const;
  void plan_epoch();
  const std::vector<Example>& examples_;
  int64_t max_tokens_;
  bool shuffle_;
  uint64_t seed_;
  ObjectiveKind kind_;
  Rng rng_;
  DataCursor cursor_;
  std::vector<MicroBatchPlan> plans_;  // the current epoch's packing
};

}  // namespace sbp
